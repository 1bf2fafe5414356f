// The Investigator: live diagnosis as a service. For one caller's question it gathers what Purser
// knows now — the fleet's workloads, nodes and queues (on the fleet's thread), the routes and
// model servers the gateway serves, the observer's series, fleet events and audit entries (store
// reads, on the reader pool), the gateway's events — into a diagnose::Case, scoped to what the
// caller may see; then it answers from that case with the engine, renaming another tenant's
// objects before the engine reads them (CaseRedactor), so the answer never holds their names.
//
// The API (api/diagnose_api.cc) parses the question, asks here, and renders; narration
// (narrate.h) sits beside the answer.
//
// Scoping: a platform admin asks about anything and sees every name. Anyone else asks only about
// what they may see — routes they may use and the providers serving them, their tenant's teams
// and users, queues and workloads as the fleet API scopes them (workloads/visibility.h), nodes
// and the fleet as a whole — and anything else is not found, as if it did not exist.
//
// Thread-safety: const after construction; gather() may run on any worker, concurrently.
#pragma once

#include <utility>

#include <boost/asio/awaitable.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/json.h"
#include "common/result.h"
#include "common/work_pool.h"
#include "diagnose/case.h"
#include "diagnose_live/redactor.h"
#include "gateway/gateway.h"
#include "identity/directory.h"
#include "identity/identity.h"
#include "ledger/records.h"
#include "ledger/wallet_book.h"
#include "observe/series.h"
#include "workloads/fleet_service.h"

namespace purser::diagnose_live {

// What the configuration says about a provider, for the inventory.
struct ProviderFacts {
  std::string name;
  bool scraped = false;           // it has a metrics_url: a model server Purser observes
  std::vector<std::string> gpus;  // "EXPORTER/GPU-INDEX" it runs on
};

// What the investigator reads.
struct Sources {
  const Clock& clock;
  const identity::Directory& directory;
  const ledger::WalletBook& wallets;
  const ledger::Records& records;  // the audit log's reads
  const observe::SeriesStore* series = nullptr;
  const gateway::Gateway* gateway = nullptr;
  // Where the store reads run (keyed by the caller's tenant); none: on the caller's thread.
  WorkPool* readers = nullptr;
  // The fleet this replica leads now; none (or null): no workloads, queues or fleet events.
  std::function<std::shared_ptr<workloads::FleetService>()> fleet;
  std::vector<ProviderFacts> providers;
};

struct Question {
  std::string kind;     // route | deployment | workload | queue | team | user | node | fleet
  std::string name;     // NAMESPACE/NAME for a workload, "*" for the fleet
  std::string symptom;  // slow | errors | pending | over_budget | idle | any
  int64_t since_ms = 30 * 60 * 1000;
};

// One caller's case, and what of it they may not see.
struct Gathered {
  diagnose::Case c;
  CaseRedactor redactor;  // empty for a platform admin
};

class Investigator {
 public:
  explicit Investigator(Sources sources) : s_(std::move(sources)) {}

  // The longest window a question may ask about: what the series store keeps (a day without one).
  int64_t retentionMs() const;

  // The case for `who`'s question over the last `since_ms`. kNotFound, on field "name", when the
  // question names nothing `who` may see; a store read's error (kUnavailable when the caller's
  // tenant has its share of the readers queued) otherwise.
  boost::asio::awaitable<Result<Gathered>> gather(const identity::Principal& who,
                                                  const Question& q) const;

  // The findings as `who` may see them: {"question", "window", "findings", ...} (incidents.md),
  // another tenant's objects renamed and workloads named as their members write them.
  Json answer(const identity::Principal& who, const Question& q, Gathered g) const;

 private:
  const Sources s_;
};

}  // namespace purser::diagnose_live
