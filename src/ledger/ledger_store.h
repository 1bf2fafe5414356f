// LedgerStore: the SQL for wallets and usage. Writes take the caller's transaction.
#pragma once

#include <string>
#include <vector>

#include "common/result.h"
#include "ledger/rate_limiter.h"
#include "ledger/wallet_book.h"
#include "store/store.h"

namespace purser::ledger {

const std::vector<store::Migration>& ledgerMigrations();

Result<void> insertWallet(store::Tx& tx, const WalletSpec& w, const std::string& created_at);
Result<std::vector<WalletSpec>> loadWallets(store::Store& store);

Result<void> insertRateLimit(store::Tx& tx, const RateLimitSpec& l, const std::string& created_at);
Result<std::vector<RateLimitSpec>> loadRateLimits(store::Store& store);

// What each wallet has been charged since `window_start` of its own current window, summed from
// the stored charges (used to rebuild WalletBook at start).
Result<Money> spentSince(store::Tx& tx, const std::string& wallet_id, SystemTime since);

}  // namespace purser::ledger
