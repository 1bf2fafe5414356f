// The ledger's parts of `purser serve` that are not the ledger itself: the price book from the
// configuration, what recovery found said in the log, the ledger's metrics, and (replicas sharing
// PostgreSQL) the thread that keeps this replica's budget and rate-limit leases filled.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "config/config.h"
#include "http/metrics.h"
#include "identity/directory.h"
#include "ledger/audit.h"
#include "ledger/meter.h"
#include "ledger/price.h"
#include "ledger/rate_leases.h"
#include "ledger/wallet_book.h"
#include "ledger/wallet_leases.h"
#include "server/data_dir.h"
#include "store/store.h"

namespace purser::server {

// The meter over its journal (data_dir/journal), replayed into the store; a journal a crash cut
// short is said in the log.
Result<std::unique_ptr<ledger::Meter>> openMeter(const config::Config& config, store::Store& store,
                                                 ledger::WalletBook& wallets, const Clock& clock,
                                                 ledger::AuditLog& audit, const DataDir& data_dir,
                                                 const std::string& replica);

ledger::PriceBook priceBook(const config::Config& config);

// Says in the log what Meter::recover() charged, held again and set aside.
void logRecovery(const ledger::Recovery& recovery);

// At every scrape: each wallet's spent ratio, the reservations outstanding; with leases (replicas
// sharing PostgreSQL), the store's round trips and the leases' grants, top-ups and takes.
void addLedgerMetrics(http::MetricsRegistry& metrics, const ledger::WalletBook& wallets,
                      const identity::Directory& directory, ledger::WalletLeases* leases,
                      ledger::RateLeases* rate_leases);

// The lease loop: every 50 ms the leases are refilled ahead of need, renewed and given back, on
// a thread of its own (each turn may wait for the store). Stops when its stop is requested.
std::jthread leaseLoop(ledger::WalletLeases& leases, ledger::RateLeases& rate_leases);

}  // namespace purser::server
