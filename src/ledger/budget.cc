#include "ledger/budget.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace purser::ledger {

Hold& Hold::operator=(Hold&& other) noexcept {
  if (this != &other) {
    release();
    budget_ = std::exchange(other.budget_, nullptr);
    id_ = std::move(other.id_);
    wallets_ = std::move(other.wallets_);
    buckets_ = std::move(other.buckets_);
    tokens_ = other.tokens_;
    sequence_ = other.sequence_;
    ahead_ = other.ahead_;
    session_counted_ = std::exchange(other.session_counted_, false);
    session_tenant_ = std::move(other.session_tenant_);
    session_id_ = std::move(other.session_id_);
    session_held_ = other.session_held_;
  }
  return *this;
}

Result<Settlement> Hold::settle(UsageEvent event) {
  Budget* budget = std::exchange(budget_, nullptr);
  if (budget == nullptr) {
    return fail(Error(ErrorCode::kFailedPrecondition, "the hold was settled or released before"));
  }
  if (ahead_) {
    budget->meter_.releaseAhead(id_);
    return fail(Error(ErrorCode::kFailedPrecondition,
                      "a hold ahead of use is not settled: what ran is charged (Budget::charge)"));
  }
  event.id = id_;
  budget->reconcileTokens(buckets_, event.tokens.total() - tokens_);
  if (session_counted_) {
    // Never more than was held, as the wallets are charged.
    budget->caps_.settle(session_tenant_, session_id_, session_held_,
                         std::min(event.cost, session_held_));
  }
  return budget->meter_.settle(std::move(event));
}

void Hold::release() {
  Budget* budget = std::exchange(budget_, nullptr);
  if (budget == nullptr) return;
  if (ahead_) {
    budget->meter_.releaseAhead(id_);
    return;
  }
  for (const auto& b : buckets_) budget->limiter_.adjust(b, -b.cost);
  if (session_counted_) budget->caps_.release(session_tenant_, session_id_, session_held_);
  if (auto r = budget->meter_.release(id_); !r) {
    spdlog::warn("ledger: hold {} not released: {}", id_, r.error().message);
  }
}

std::vector<BucketRequest> Budget::rateBuckets(const Payer& payer, std::string_view model,
                                               int64_t tokens) const {
  std::vector<BucketRequest> out;
  for (const auto& k : payer.keys) {
    if (k.rpm > 0) out.push_back({"key:" + k.key_id + ":rpm", k.rpm, 1});
    if (k.tpm > 0 && tokens > 0) out.push_back({"key:" + k.key_id + ":tpm", k.tpm, tokens});
  }
  for (auto& b : limits_.buckets(scopesOf(payer.charged), model, tokens)) {
    out.push_back(std::move(b));
  }
  return out;
}

Result<Hold> Budget::hold(const HoldRequest& request, RateDecision* rate) {
  return *take(request, rate, /*may_wait=*/true);
}

std::optional<Result<Hold>> Budget::tryHold(const HoldRequest& request, RateDecision* rate) {
  return take(request, rate, /*may_wait=*/false);
}

std::optional<Result<Hold>> Budget::take(const HoldRequest& request, RateDecision* rate,
                                         bool may_wait) {
  Hold h;
  // The run's cap first: a run at its cap takes nothing else.
  const std::string& tenant = request.draft.tenant_id;
  const std::string& session = request.draft.session_id;
  Money session_held;
  bool session_counted = false;
  if (!session.empty() && (request.session_cap || caps_.tracked(tenant, session))) {
    if (!caps_.tracked(tenant, session)) {
      if (!may_wait) return std::nullopt;  // what the run spent must be read from the store
      auto spent = meter_.sessionSpent(tenant, session);
      if (!spent) return Result<Hold>(fail(spent.error()));
      caps_.track(tenant, session, *spent);
    }
    auto held = caps_.hold(tenant, session, request.session_cap, request.amount);
    if (!held) return Result<Hold>(fail(held.error()));
    session_held = *held;
    session_counted = true;
  }
  const auto give_back_session = [&] {
    if (session_counted) caps_.release(tenant, session, session_held);
  };
  h.buckets_ = rateBuckets(request.payer, request.model, request.tokens);
  std::optional<RateDecision> decision =
      may_wait ? limiter_.acquire(h.buckets_) : limiter_.tryAcquire(h.buckets_);
  if (!decision) {
    give_back_session();
    return std::nullopt;  // the shared limits must be asked: nothing was taken
  }
  if (rate != nullptr) *rate = *decision;
  if (!decision->allowed) {
    give_back_session();
    return Result<Hold>(
        fail(Error(ErrorCode::kResourceExhausted, "rate limit " + decision->key + " reached")));
  }
  h.wallets_ = wallets_.chain(request.payer.charged, request.model);
  ReserveOptions options = request.options;
  options.may_wait = may_wait;
  auto sequence = meter_.reserve(request.draft, h.wallets_, request.amount, request.lease, options);
  if (!sequence) {
    // Nothing ran: what the rate limits and the run's cap took goes back.
    for (const auto& b : h.buckets_) limiter_.adjust(b, -b.cost);
    give_back_session();
    if (!may_wait && sequence.error().code == ErrorCode::kAborted) return std::nullopt;
    return Result<Hold>(fail(sequence.error()));
  }
  h.session_counted_ = session_counted;
  h.session_tenant_ = tenant;
  h.session_id_ = session;
  h.session_held_ = session_held;
  h.budget_ = this;
  h.id_ = request.draft.id;
  h.tokens_ = request.tokens;
  h.sequence_ = *sequence;
  return Result<Hold>(std::move(h));
}

Result<Settlement> Budget::settle(const Payer& payer, std::string_view model, UsageEvent event,
                                  int64_t estimated_tokens) {
  auto settled = PURSER_TRY_VALUE(meter_.settle(event));
  if (!settled.duplicate) {
    reconcileTokens(rateBuckets(payer, model, 1), event.tokens.total() - estimated_tokens);
  }
  return settled;
}

std::optional<WalletStatus> Budget::shortfall(const Charged& payer, std::string_view model,
                                              Money need) const {
  for (const auto& id : wallets_.chain(payer, model)) {
    auto st = wallets_.status(id);
    if (!st || !st->spec.hard) continue;
    if (st->remaining.isZero() || st->remaining < need) return std::move(*st);
  }
  return std::nullopt;
}

Result<Hold> Budget::holdAhead(const Charged& payer, std::string_view model, std::string id,
                               Money amount, Duration lease) {
  Hold h;
  h.wallets_ = wallets_.chain(payer, model);
  PURSER_TRY(meter_.holdAhead(id, h.wallets_, amount, lease));
  h.budget_ = this;
  h.id_ = std::move(id);
  h.ahead_ = true;
  return h;
}

Result<Meter::Charge> Budget::charge(const Charged& payer, std::string_view model,
                                     UsageEvent event) {
  return meter_.charge(std::move(event), wallets_.chain(payer, model));
}

void Budget::reconcileTokens(const std::vector<BucketRequest>& buckets, int64_t delta) {
  if (delta == 0) return;
  for (const auto& b : buckets) {
    if (b.key.ends_with(":tpm")) limiter_.adjust(b, delta);
  }
}

}  // namespace purser::ledger
