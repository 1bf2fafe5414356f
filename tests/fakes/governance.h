// One in-process governance world for the API's tests: a real SQLite store and journal in a
// temporary directory, the directory of identities, the wallet book, the audit log and its
// Records, the meter, the rate limits, and the api::Services over them — the same parts, built
// the same way, that `purser serve` wires (server/daemon.cc). Header-only: a test that includes
// it links purser_api.
//
// Use it as a base of a test fixture: the parts are its members, by the names the server uses.
//   class MyTest : public ::testing::Test, protected testing::Governance {
//     void SetUp() override { ASSERT_TRUE(openGovernance()); ... }
//   };
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "api/admin_api.h"
#include "common/clock.h"
#include "common/id.h"
#include "common/random.h"
#include "fakes/temp_dir.h"
#include "identity/directory.h"
#include "identity/identity_store.h"
#include "ledger/audit.h"
#include "ledger/ledger_store.h"
#include "ledger/meter.h"
#include "ledger/price.h"
#include "ledger/rate_limiter.h"
#include "ledger/records.h"
#include "ledger/wallet_book.h"
#include "store/sqlite_store.h"

namespace purser::testing {

// The platform admin key every governance world starts with.
inline constexpr const char* kGovernanceAdminKey = "test-platform-admin-key-0123456789";

// The budget alerts the API posted, recorded instead of sent (the webhook itself is
// server/alert_webhook.h, tested on its own).
class RecordedAlerts final : public ledger::AlertSink {
 public:
  struct Posted {
    std::string tenant_id;
    ledger::Alert alert;
  };
  void post(const std::string& tenant_id, const std::vector<ledger::Alert>& alerts) override {
    std::lock_guard lock(mu_);
    for (const auto& a : alerts) posted_.push_back({tenant_id, a});
  }
  std::vector<Posted> posted() const {
    std::lock_guard lock(mu_);
    return posted_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<Posted> posted_;  // guarded by mu_
};

// Makes the tables current and loads identities, wallets and rate limits, as a start does.
inline Result<void> loadGovernance(store::Store& store, const Clock& clock,
                                   identity::Directory& directory, ledger::WalletBook& wallets,
                                   ledger::RateLimitBook& rate_limits) {
  PURSER_TRY(identity::openDirectory(store, directory));
  PURSER_TRY(store.migrate("sessions", identity::sessionMigrations()));
  PURSER_TRY(ledger::migrateLedger(store));
  return ledger::loadBooks(store, clock, wallets, rate_limits, /*keep_known=*/false);
}

class Governance {
 protected:
  explicit Governance(ledger::PriceBook prices_in = {}) : prices(std::move(prices_in)) {}

  // Opens the store and the journal, loads the books and makes the platform admin with
  // kGovernanceAdminKey. `configure` may set Services' optional parts before the admin is made.
  ::testing::AssertionResult openGovernance(
      const std::function<void(api::Services&)>& configure = nullptr) {
    auto s = store::SqliteStore::open({.path = dir.file("purser.db")}, clock);
    if (!s) return ::testing::AssertionFailure() << s.error().toString();
    store = std::move(*s);
    auto m = ledger::Meter::open(*store, wallets, clock, &audit, {.dir = dir.file("journal")});
    if (!m) return ::testing::AssertionFailure() << m.error().toString();
    meter = std::move(*m);
    records = std::make_unique<ledger::Records>(*store, audit);
    services.emplace(api::Services{clock, random, ids, *records, directory, wallets, *meter,
                                   limiter, rate_limits, prices, &alerts});
    services->sessions = &session_book;
    if (configure) configure(*services);
    if (auto loaded = loadGovernance(*store, clock, directory, wallets, rate_limits); !loaded) {
      return ::testing::AssertionFailure() << loaded.error().toString();
    }
    auto generated = api::bootstrap(*services, std::string(kGovernanceAdminKey));
    if (!generated) return ::testing::AssertionFailure() << generated.error().toString();
    if (generated->has_value()) {
      return ::testing::AssertionFailure() << "the given admin key was not used";
    }
    return ::testing::AssertionSuccess();
  }

  TempDir dir;
  ManualClock clock;
  SeededRandom random{7};
  IdGenerator ids{clock, random};
  std::unique_ptr<store::SqliteStore> store;
  identity::Directory directory{clock};
  ledger::WalletBook wallets{clock};
  ledger::AuditLog audit{clock};
  std::unique_ptr<ledger::Meter> meter;
  ledger::RateLimiter limiter{clock};
  ledger::RateLimitBook rate_limits;
  const ledger::PriceBook prices;
  std::unique_ptr<ledger::Records> records;
  RecordedAlerts alerts;
  identity::SessionBook session_book;  // people signed in (api::Services::sessions)
  std::optional<api::Services> services;
};

}  // namespace purser::testing
