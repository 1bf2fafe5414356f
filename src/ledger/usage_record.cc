#include "ledger/usage_record.h"

#include <fmt/format.h>

namespace purser::ledger {

namespace {

constexpr char kIntent = 'I';
constexpr char kUsage = 'U';
constexpr char kRelease = 'R';
constexpr uint64_t kMaxList = 1'000'000;

class Writer {
 public:
  explicit Writer(std::string& out) : out_(out) {}
  void u(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<char>((v & 0x7F) | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<char>(v));
  }
  // Signed, zigzag-encoded so small negative numbers stay small.
  void i(int64_t v) { u((static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63)); }
  void s(std::string_view v) {
    u(v.size());
    out_.append(v);
  }
  void list(const std::vector<std::string>& v) {
    u(v.size());
    for (const auto& x : v) s(x);
  }

 private:
  std::string& out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool ok() const { return ok_; }
  bool atEnd() const { return pos_ == in_.size(); }
  uint64_t u() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= in_.size()) return bad();
      const auto b = static_cast<unsigned char>(in_[pos_++]);
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) return v;
    }
    return bad();
  }
  int64_t i() {
    const uint64_t z = u();
    return static_cast<int64_t>((z >> 1) ^ (~(z & 1) + 1));
  }
  std::string s() {
    const uint64_t n = u();
    if (!ok_ || n > in_.size() - pos_) {
      bad();
      return {};
    }
    std::string v(in_.substr(pos_, n));
    pos_ += n;
    return v;
  }
  std::vector<std::string> list() {
    const uint64_t n = u();
    std::vector<std::string> v;
    if (!ok_ || n > kMaxList || n > in_.size() - pos_) {
      bad();
      return v;
    }
    v.reserve(n);
    for (uint64_t k = 0; k < n && ok_; ++k) v.push_back(s());
    return v;
  }
  void invalid() { bad(); }
  char kind() {
    if (pos_ >= in_.size()) return static_cast<char>(bad());
    return in_[pos_++];
  }

 private:
  uint64_t bad() {
    ok_ = false;
    pos_ = in_.size();
    return 0;
  }
  std::string_view in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

// Who and what: the fields a draft and a settled event share.
void writeWho(Writer& w, const UsageEvent& e) {
  w.s(e.id);
  w.i(unixMillis(e.at));
  w.s(e.tenant_id);
  w.s(e.team_id);
  w.s(e.user_id);
  w.s(e.service_account_id);
  w.s(e.key_id);
  w.s(e.session_id);
  w.s(e.route);
  w.s(e.provider);
  w.s(e.model);
}

void readWho(Reader& r, UsageEvent& e) {
  e.id = r.s();
  // Within what a time point in nanoseconds can hold (about ±292 years around 1970).
  constexpr int64_t kMaxMs = INT64_MAX / 1'000'000;
  const int64_t at_ms = r.i();
  if (at_ms > kMaxMs || at_ms < -kMaxMs) r.invalid();
  e.at = r.ok() ? SystemTime(std::chrono::milliseconds(at_ms)) : SystemTime();
  e.tenant_id = r.s();
  e.team_id = r.s();
  e.user_id = r.s();
  e.service_account_id = r.s();
  e.key_id = r.s();
  e.session_id = r.s();
  e.route = r.s();
  e.provider = r.s();
  e.model = r.s();
}

}  // namespace

void encodeRecord(const LedgerRecord& record, std::string& out) {
  Writer w(out);
  if (const auto* in = std::get_if<IntentRecord>(&record)) {
    out.push_back(kIntent);
    writeWho(w, in->draft);
    w.list(in->wallets);
    w.i(in->amount.nanos());
    w.i(in->at_ms);
    w.i(in->expires_ms);
    w.u(in->external ? 1 : 0);
    w.i(in->token_estimate);
  } else if (const auto* us = std::get_if<UsageRecord>(&record)) {
    const UsageEvent& e = us->event;
    out.push_back(kUsage);
    writeWho(w, e);
    w.list(us->wallets);
    for (int64_t n : {e.tokens.input, e.tokens.output, e.tokens.cached_input, e.tokens.cache_write,
                      e.tokens.reasoning, e.cost.nanos(), e.overage.nanos(), e.latency_ms,
                      e.ttft_ms, int64_t{e.status}}) {
      w.i(n);
    }
    w.u((e.estimated ? 1U : 0U) | (e.recovered ? 2U : 0U));
  } else {
    out.push_back(kRelease);
    w.list(std::get<ReleaseRecord>(record).ids);
  }
}

Result<LedgerRecord> decodeRecord(std::string_view bytes) {
  Reader r(bytes);
  const char kind = r.kind();
  LedgerRecord out;
  if (kind == kIntent) {
    IntentRecord in;
    readWho(r, in.draft);
    in.wallets = r.list();
    in.amount = Money::fromNanos(r.i());
    in.at_ms = r.i();
    in.expires_ms = r.i();
    in.external = r.u() != 0;
    in.token_estimate = r.i();
    out = std::move(in);
  } else if (kind == kUsage) {
    UsageRecord us;
    UsageEvent& e = us.event;
    readWho(r, e);
    us.wallets = r.list();
    e.tokens.input = r.i();
    e.tokens.output = r.i();
    e.tokens.cached_input = r.i();
    e.tokens.cache_write = r.i();
    e.tokens.reasoning = r.i();
    e.cost = Money::fromNanos(r.i());
    e.overage = Money::fromNanos(r.i());
    e.latency_ms = r.i();
    e.ttft_ms = r.i();
    e.status = static_cast<int>(r.i());
    const uint64_t flags = r.u();
    e.estimated = (flags & 1) != 0;
    e.recovered = (flags & 2) != 0;
    out = std::move(us);
  } else if (kind == kRelease) {
    out = ReleaseRecord{r.list()};
  } else if (r.ok()) {
    return fail(invalidArgument(
        fmt::format("a ledger record of kind {} is unknown (written by a newer Purser?)",
                    static_cast<int>(static_cast<unsigned char>(kind)))));
  }
  if (!r.ok()) return fail(invalidArgument("a ledger record is truncated"));
  if (!r.atEnd()) return fail(invalidArgument("a ledger record has bytes past its end"));
  return out;
}

}  // namespace purser::ledger
