// Budget: the one owner of the money path's decisions. Work that may cost money — a model
// request, a reservation made through the API — asks it for a hold: it works out, once, the
// wallet chain and the rate-limit buckets of whoever pays, takes the rate limits, reserves the
// worst case on every wallet of the chain all or nothing (docs/architecture.md rule 2), and appends
// the intent to the ledger's journal (Meter). The answer is a move-only Hold that settles or
// releases itself: a hold dropped unsettled gives its budget back, so no early return or exception
// can leave a phantom hold behind.
//
// What a settlement may charge — never more than was held, never past a hard wallet's limit, the
// rest recorded as overage — is WalletBook's rule; Budget is its only caller on the request path.
//
// Work charged after it runs (a workload's GPU time) goes through Budget too: holdAhead() holds the
// next stretch on the same chain (in memory; nothing is journaled, since nothing is settled from
// it), and charge() charges what ran. It takes no rate limits: they count requests and tokens, and
// a workload's limit is its queue's quota. Usage that ran elsewhere (an import) is recorded through
// it too (record()). Budget is the one door to the wallets: nothing outside the ledger reserves,
// charges or releases on them by another way.
//
// A run capped with x-purser-session-budget is held against its cap too (SessionCaps): refused
// before any rate limit or wallet is taken when the cap has no room.
//
// Thread-safe; one per process (it keeps the runs' caps).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/money.h"
#include "common/result.h"
#include "ledger/meter.h"
#include "ledger/rate_limiter.h"
#include "ledger/scope.h"
#include "ledger/session_caps.h"
#include "ledger/wallet_book.h"

namespace purser::ledger {

// A key's own rate limits (0: none).
struct KeyRate {
  std::string key_id;
  int64_t rpm = 0;
  int64_t tpm = 0;
};

// Who pays for a piece of work: its scopes (tenant, team, owner, key chain) and the rate limits of
// the key it came with and of every key that key derives from, nearest first.
struct Payer {
  Charged charged;
  std::vector<KeyRate> keys;
};

struct HoldRequest {
  Payer payer;
  std::string model;   // what budgets and limits are scoped to: a route alias or a model name
  UsageEvent draft;    // the event's id and who; what it used is settled later
  Money amount;        // the worst case
  int64_t tokens = 0;  // the estimate tokens-per-minute limits take now (0: they take nothing)
  Duration lease = std::chrono::minutes(10);
  ReserveOptions options;
  // The run's cap (x-purser-session-budget) for draft.session_id of draft.tenant_id; a run
  // capped before is held against its cap whether or not the request repeats it.
  std::optional<Money> session_cap;
};

class Budget;

class Hold {
 public:
  Hold() = default;
  Hold(Hold&& other) noexcept { *this = std::move(other); }
  Hold& operator=(Hold&& other) noexcept;
  Hold(const Hold&) = delete;
  Hold& operator=(const Hold&) = delete;
  ~Hold() { release(); }

  bool active() const { return budget_ != nullptr; }
  const std::string& id() const { return id_; }
  const std::vector<std::string>& wallets() const { return wallets_; }
  // The journal record of the intent (for Meter::whenDurable).
  uint64_t journalSequence() const { return sequence_; }

  // Charges `event.cost` to the chain (event.id is the hold's) and gives the tokens-per-minute
  // limits back what the estimate took beyond `event.tokens` (or takes the difference). The hold
  // is done afterwards, whatever the outcome.
  Result<Settlement> settle(UsageEvent event);
  // The work did not run (refused upstream, failed, cut off inside Purser): the budget and what
  // the rate limits took are given back.
  void release();
  // The hold outlives this object (an API reservation is settled or released by id later).
  void detach() { budget_ = nullptr; }
  // Taken by Budget::holdAhead(): released, never settled.
  bool ahead() const { return ahead_; }

 private:
  friend class Budget;
  Budget* budget_ = nullptr;
  std::string id_;
  std::vector<std::string> wallets_;
  std::vector<BucketRequest> buckets_;
  int64_t tokens_ = 0;
  uint64_t sequence_ = 0;
  bool ahead_ = false;
  // What this hold took from its run's cap (SessionCaps), when the run is capped.
  bool session_counted_ = false;
  std::string session_tenant_;
  std::string session_id_;
  Money session_held_;
};

class Budget {
 public:
  Budget(WalletBook& wallets, Meter& meter, RateLimiter& limiter, const RateLimitBook& limits)
      : wallets_(wallets), meter_(meter), limiter_(limiter), limits_(limits) {}

  // The buckets one request by `payer` on `model` draws from: each key's own requests and tokens
  // per minute, then the limits configured on its scopes. `tokens` 0 leaves tokens buckets out.
  std::vector<BucketRequest> rateBuckets(const Payer& payer, std::string_view model,
                                         int64_t tokens) const;

  // Takes the rate limits, then the hold; all or nothing. Refused by a rate limit: the error is
  // kResourceExhausted and `*rate` (when given) says which bucket, with allowed false. Refused by
  // a wallet: kResourceExhausted naming it (the rate limits are given back). kAlreadyExists for a
  // used id, kUnavailable when the ledger cannot record it.
  Result<Hold> hold(const HoldRequest& request, RateDecision* rate = nullptr);
  // As hold(), without ever waiting on the store (for an HTTP worker): where the hold needs a
  // store round trip first — replicas sharing the store, a rate limit beyond the units this
  // replica holds, a budget lease to extend — nothing is taken and the answer is nullopt; the
  // caller then calls hold() where it may wait (off the workers). Without a shared store it is
  // hold().
  std::optional<Result<Hold>> tryHold(const HoldRequest& request, RateDecision* rate = nullptr);

  // Settles a hold made earlier and detached, by id (an API reservation): `estimated_tokens` is
  // what its tokens-per-minute limits took.
  Result<Settlement> settle(const Payer& payer, std::string_view model, UsageEvent event,
                            int64_t estimated_tokens);
  // Releases a hold made earlier and detached, by id: the work never ran.
  Result<void> release(const std::string& id) { return meter_.release(id); }

  // Usage that ran elsewhere, recorded after the fact (history brought from another gateway, work
  // metered outside Purser): charged to `payer`'s chain for `model` as Meter::record does — only
  // to the wallets whose window holds the event's time, recorded once.
  Result<Meter::Charge> record(const Charged& payer, std::string_view model, UsageEvent event) {
    return meter_.record(std::move(event), wallets_.chain(payer, model));
  }

  // Work charged after it runs (see the file comment). The first hard wallet of `payer`'s chain
  // for `model` that cannot hold `need` — nothing left, or less than `need` — or nullopt.
  std::optional<WalletStatus> shortfall(const Charged& payer, std::string_view model,
                                        Money need) const;
  // Holds `amount` on the chain for the next stretch of such work; kResourceExhausted names the
  // wallet that cannot. The Hold gives it back when released or dropped.
  Result<Hold> holdAhead(const Charged& payer, std::string_view model, std::string id, Money amount,
                         Duration lease);
  // Charges what ran (Meter::charge) to the chain: the write that records it, for the caller to
  // commit with its own state, and the alerts the charge raised.
  Result<Meter::Charge> charge(const Charged& payer, std::string_view model, UsageEvent event);

  Meter& meter() { return meter_; }
  const SessionCaps& sessionCaps() const { return caps_; }

 private:
  friend class Hold;
  // hold() and tryHold(): nullopt only when `may_wait` is false and the store must be asked.
  std::optional<Result<Hold>> take(const HoldRequest& request, RateDecision* rate, bool may_wait);
  void reconcileTokens(const std::vector<BucketRequest>& buckets, int64_t delta);

  WalletBook& wallets_;
  Meter& meter_;
  RateLimiter& limiter_;
  const RateLimitBook& limits_;
  SessionCaps caps_;
};

}  // namespace purser::ledger
