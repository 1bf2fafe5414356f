// The admin REST API under /api/v1/: tenants, teams, users, service accounts, keys, wallets and
// the audit log. JSON in and out; `Authorization: Bearer <key>`; errors are problem+json naming
// the field at fault. Every change is authorized by identity::authorize(), written to the store
// together with its audit entry, and only then applied to the in-memory directory and wallets;
// every denial is audited too. Handlers never block their worker: store writes are awaited.
//
// Thread-safety: handlers run concurrently on the workers; the parts they share are thread-safe.
#pragma once

#include <utility>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/id.h"
#include "common/random.h"
#include "common/work_pool.h"
#include "gateway/gateway.h"
#include "gateway/secrets.h"
#include "http/router.h"
#include "identity/denial_log.h"
#include "identity/directory.h"
#include "identity/sessions.h"
#include "ledger/audit.h"
#include "ledger/budget.h"
#include "ledger/meter.h"
#include "ledger/price.h"
#include "ledger/rate_limiter.h"
#include "ledger/records.h"
#include "ledger/reservations.h"
#include "ledger/wallet_book.h"
#include "observe/series.h"

namespace purser::api {

struct Services {
  const Clock& clock;
  Random& random;
  IdGenerator& ids;
  // Where changes are committed with their audit entries, and the audit log read.
  ledger::Records& records;
  identity::Directory& directory;
  ledger::WalletBook& wallets;
  ledger::Meter& meter;
  ledger::RateLimiter& limiter;
  ledger::RateLimitBook& rate_limits;
  const ledger::PriceBook& prices;
  // Where budget alerts are posted (the webhook, best effort; the audit entry is the record).
  ledger::AlertSink* alerts = nullptr;
  // The model gateway and its sealed provider keys, for /api/v1/providers (platform admins).
  gateway::Gateway* gateway = nullptr;
  gateway::ProviderKeyStore* provider_keys = nullptr;
  // Bounds the audit entries denials write per principal; without it every denial is written.
  identity::DenialLog* denials = nullptr;
  // What scraping keeps of the model servers' metrics, for the targets' history.
  const observe::SeriesStore* series = nullptr;
  // What percentiles are judged over (observe.window), Purser's own measurements included.
  Duration observe_window = std::chrono::seconds(60);
  // Where the store reads behind reports and lists run (audit, usage and spend, route statistics,
  // ended workloads, fleet events, diagnosis), never on an HTTP worker; without one they run on
  // the caller's thread (unit tests).
  WorkPool* readers = nullptr;
  // The one door to the wallets (holds, settlements, GPU time charged after it ran), over the
  // books above; the fleet service is given it too. Copies share it.
  std::shared_ptr<ledger::Budget> budget =
      std::make_shared<ledger::Budget>(wallets, meter, limiter, rate_limits);
  // The outstanding reservations made through this API. Each Services made is a table of its own;
  // its copies (the route tables keep one each) share it.
  std::shared_ptr<ledger::Reservations> reservations = std::make_shared<ledger::Reservations>();
  // People signed in through the identity provider (oidc); without it only keys authenticate.
  identity::SessionBook* sessions = nullptr;
};

// On first start (no keys at all): creates the platform admin "admin" and its key — the value
// of `admin_key` (PURSER_ADMIN_KEY, at least 16 characters) or a generated one — and audits it.
// Returns the key to show once when one was generated, nullopt otherwise. Runs before the
// workers start (it waits for its write).
Result<std::optional<std::string>> bootstrap(const Services& s,
                                             const std::optional<std::string>& admin_key);

// The audit entries a denial of `who` writes (entry `action`, on `target`, with `detail`):
// through the DenialLog when there is one, else the denial itself.
std::vector<ledger::AuditEntry> denialEntries(const Services& s, const identity::Principal& who,
                                              std::string action, std::string target,
                                              std::string detail);

// The principal of a request: its `Authorization: Bearer <key>` (an API key, or the CLI's sign-in
// token "pss_..."), else its mapped client certificate, else its `purser_session` cookie.
// kUnauthenticated when it has none or it is not valid. A state-changing request (not GET, HEAD
// or OPTIONS) made with the cookie must carry the session's CSRF token as `X-Purser-CSRF`:
// kPermissionDenied otherwise.
Result<identity::Principal> authenticate(const Services& s, const http::Request& req);

Result<void> addAdminRoutes(http::Router& router, const Services& s);

// The metering API: reservations before work runs, settlement after, usage and spend queries.
//   POST   /api/v1/reservations              {amount, model?, route?, session_id?, tokens?,
//                                             lease?, id?}
//   POST   /api/v1/reservations/{id}/settle  {cost, tokens?, status?, latency_ms?, ttft_ms?,
//                                             provider?}
//   DELETE /api/v1/reservations/{id}
//   POST   /api/v1/usage                     {events: [...]}: usage that ran elsewhere
//   GET    /api/v1/usage?scope=KIND:ID&from=&to=&limit=
//   GET    /api/v1/spend?scope=KIND:ID&group_by=user|team|key|model|route|session|day&from=&to=
//   POST   /api/v1/rate-limits, GET /api/v1/rate-limits?scope=KIND:ID
Result<void> addMeteringRoutes(http::Router& router, const Services& s);

}  // namespace purser::api
