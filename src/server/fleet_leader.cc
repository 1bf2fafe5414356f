#include "server/fleet_leader.h"

#include <spdlog/spdlog.h>

#include <utility>
#include <vector>

#include "api/problem.h"

namespace purser::server {

namespace {

// The advisory lock whose holder leads the fleet (any fixed number, the same for every replica).
constexpr int64_t kFleetLockKey = 7244000002;
// The header a forwarded request carries (the forwarding replica's name): not forwarded again.
constexpr const char* kForwardedHeader = "X-Purser-Forwarded-By";

const std::vector<store::Migration> kLeaderMigrations = {
    {1, "the replica leading the fleet, and its epoch",
     "CREATE TABLE fleet_leader (id TEXT PRIMARY KEY, epoch INTEGER NOT NULL, replica TEXT NOT "
     "NULL, address TEXT NOT NULL, since_ms INTEGER NOT NULL);"
     "INSERT INTO fleet_leader (id, epoch, replica, address, since_ms) VALUES ('fleet', 0, '', "
     "'', 0);"},
};

// Hop-by-hop fields, and those the client sets itself: not passed on either way.
bool passedOn(std::string_view name) {
  for (const char* skip : {"Connection", "Keep-Alive", "Transfer-Encoding", "Content-Length",
                           "Host", "Upgrade", "TE", "Trailer", "Proxy-Connection"}) {
    if (http::equalsIgnoreCase(name, skip)) return false;
  }
  return true;
}

}  // namespace

const std::vector<store::Migration>& fleetLeaderMigrations() { return kLeaderMigrations; }

Result<std::unique_ptr<FleetLeadership>> FleetLeadership::create(store::Store& store,
                                                                 FleetLeadershipOptions options,
                                                                 Open open, const Clock& clock) {
  PURSER_TRY(store.migrate("fleet_leader", kLeaderMigrations));
  return std::unique_ptr<FleetLeadership>(
      new FleetLeadership(store, std::move(options), std::move(open), clock));
}

FleetLeadership::FleetLeadership(store::Store& store, FleetLeadershipOptions options, Open open,
                                 const Clock& clock)
    : store_(store),
      options_(std::move(options)),
      open_(std::move(open)),
      clock_(clock),
      lock_(options_.url, kFleetLockKey) {}

FleetLeadership::~FleetLeadership() { stop(); }

Result<bool> FleetLeadership::tryLead() {
  auto got = lock_.tryAcquire();
  if (!got) return fail(got.error());
  if (!*got) return false;
  return takeOver();
}

Result<bool> FleetLeadership::takeOver() {
  std::string address;
  {
    std::lock_guard lock(mu_);
    address = address_;
  }
  // The bump waits for a write of the previous leader still in flight (it holds the row FOR
  // SHARE), and every write of that leader after it fails: the fence.
  int64_t epoch = 0;
  auto bumped = store_.writeAlone([&](store::Tx& tx) -> Result<void> {
    auto rows = PURSER_TRY_VALUE(tx.query(
        "UPDATE fleet_leader SET epoch = epoch + 1, replica = $1, address = $2, since_ms = $3 "
        "WHERE id = 'fleet' RETURNING epoch",
        {options_.replica, address, unixMillis(clock_.now())}));
    if (rows.empty()) return fail(Error(ErrorCode::kDataLoss, "the fleet_leader row is missing"));
    epoch = rows[0].getInt(0);
    return {};
  });
  if (!bumped) {
    lock_.release();
    return fail(bumped.error());
  }
  Fence fence = [epoch](store::Tx& tx) -> Result<void> {
    auto rows = PURSER_TRY_VALUE(
        tx.query("SELECT epoch FROM fleet_leader WHERE id = 'fleet' FOR SHARE", {}));
    const int64_t now = rows.empty() ? 0 : rows[0].getInt(0);
    if (now != epoch) {
      return fail(Error(ErrorCode::kFailedPrecondition,
                        fmt::format("this replica no longer leads the fleet (it led in epoch {}; "
                                    "the epoch is {} now)",
                                    epoch, now)));
    }
    return {};
  };
  auto opened = open_(std::move(fence));
  if (!opened) {
    lock_.release();  // another replica may do better
    return fail(opened.error());
  }
  for (const auto& w : (*opened)->warnings()) spdlog::warn("fleet: {}", w);
  {
    std::lock_guard lock(mu_);
    fleet_ = std::shared_ptr<api::Fleet>(std::move(*opened));
    epoch_ = epoch;
  }
  epoch_seen_ = epoch;
  takeovers_.fetch_add(1, std::memory_order_relaxed);
  spdlog::info("fleet: replica {} leads the fleet (epoch {})", options_.replica, epoch);
  return true;
}

void FleetLeadership::stepDown(const std::string& why) {
  std::shared_ptr<api::Fleet> fleet;
  {
    std::lock_guard lock(mu_);
    fleet = std::move(fleet_);
    epoch_ = 0;
  }
  lock_.release();
  if (!fleet) return;
  spdlog::error(
      "fleet: replica {} no longer leads the fleet: {}; its pods keep running for the "
      "next leader",
      options_.replica, why);
  fleet->stop();
}

void FleetLeadership::setAddress(std::string address) {
  int64_t epoch = 0;
  {
    std::lock_guard lock(mu_);
    address_ = address;
    epoch = epoch_;
  }
  if (epoch == 0) return;
  auto wrote = store_.writeAlone([&](store::Tx& tx) -> Result<void> {
    PURSER_TRY(tx.exec("UPDATE fleet_leader SET address = $1 WHERE id = 'fleet' AND epoch = $2",
                       {address, epoch}));
    return {};
  });
  if (!wrote) {
    spdlog::warn(
        "fleet: this replica's address was not recorded (the others cannot forward to "
        "it until it is): {}",
        wrote.error().message);
  }
}

void FleetLeadership::start() {
  thread_ = std::jthread([this](std::stop_token stop) { run(stop); });
}

void FleetLeadership::stop() {
  {
    std::lock_guard lock(wait_mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  if (thread_.joinable()) {
    thread_.request_stop();
    wake_.notify_all();
    thread_.join();
  }
  std::shared_ptr<api::Fleet> fleet;
  {
    std::lock_guard lock(mu_);
    fleet = std::move(fleet_);
    epoch_ = 0;
  }
  if (fleet) fleet->stop();
  lock_.release();
}

void FleetLeadership::run(std::stop_token stop) {
  bool failing = false;
  while (!stop.stop_requested()) {
    {
      std::unique_lock lock(wait_mu_);
      wake_.wait_for(lock, stop, options_.interval, [] { return false; });
    }
    if (stop.stop_requested()) break;
    bool leads = false;
    {
      std::lock_guard lock(mu_);
      leads = fleet_ != nullptr;
    }
    if (leads) {
      if (auto held = lock_.check(); !held) stepDown(held.error().message);
      continue;
    }
    auto led = tryLead();
    if (!led) {
      if (!failing) spdlog::warn("fleet: cannot take the lead now: {}", led.error().message);
      failing = true;
      continue;
    }
    failing = false;
    if (*led) {
      std::string address;
      {
        std::lock_guard lock(mu_);
        address = address_;
      }
      if (!address.empty()) setAddress(address);
    }
  }
}

std::shared_ptr<api::Fleet> FleetLeadership::current() const {
  std::lock_guard lock(mu_);
  return fleet_;
}

Result<std::optional<FleetLeader>> FleetLeadership::leader() {
  std::optional<FleetLeader> out;
  PURSER_TRY(store_.read([&](store::Tx& tx) -> Result<void> {
    auto rows = PURSER_TRY_VALUE(tx.query(
        "SELECT epoch, replica, address, since_ms FROM fleet_leader WHERE id = 'fleet'", {}));
    if (rows.empty() || rows[0].getInt(0) == 0) return {};
    out = FleetLeader{rows[0].getInt(0), rows[0].getText(1), rows[0].getText(2), rows[0].getInt(3)};
    return {};
  }));
  if (out) epoch_seen_ = out->epoch;
  return out;
}

boost::asio::awaitable<http::Response> FleetLeadership::forward(http::Request& request,
                                                                http::HttpClient& client) {
  const auto unavailable = [](std::string detail) {
    http::Response r = api::problem(503, detail);
    r.headers.set("Retry-After", "1");
    return r;
  };
  if (request.headers.has(kForwardedHeader)) {
    co_return unavailable(
        "the fleet's leader changed while this request was forwarded to it; send it again");
  }
  auto who = leader();
  if (!who) co_return unavailable("the fleet's leader cannot be read: " + who.error().message);
  if (!*who || (*who)->address.empty() || (*who)->replica == options_.replica) {
    co_return unavailable("no replica leads the fleet now; another takes the lead within seconds");
  }
  http::ClientRequest out;
  out.method = request.method;
  out.url = (*who)->address + request.target;
  for (const auto& [name, value] : request.headers) {
    if (passedOn(name)) out.headers.add(name, value);
  }
  out.headers.set(kForwardedHeader, options_.replica);
  out.body = request.body;
  auto answer = co_await client.request(std::move(out));
  if (!answer) {
    co_return unavailable(fmt::format("replica {}, which leads the fleet, did not answer: {}",
                                      (*who)->replica, answer.error().message));
  }
  http::Response response;
  response.status = answer->status;
  for (const auto& [name, value] : answer->headers) {
    if (passedOn(name)) response.headers.add(name, value);
  }
  response.headers.set("X-Purser-Fleet-Leader", (*who)->replica);
  response.body = std::move(answer->body);
  co_return response;
}

void FleetLeadership::addMetrics(http::MetricsRegistry& metrics) {
  auto& leads = metrics.gauge("purser_fleet_leader",
                              "1 while this replica leads the fleet (runs admission and pods).");
  auto& epoch = metrics.gauge("purser_fleet_leader_epoch",
                              "The fleet's leadership epoch last seen by this replica.");
  auto& takeovers =
      metrics.counter("purser_fleet_takeovers_total", "Times this replica took the fleet's lead.");
  metrics.addCollector([this, &leads, &epoch, &takeovers] {
    leads.set(current() ? 1.0 : 0.0);
    epoch.set(static_cast<double>(epoch_seen_.load()));
    const uint64_t taken = takeovers_.load(std::memory_order_relaxed);
    if (taken > takeovers.value()) takeovers.inc(taken - takeovers.value());
  });
}

}  // namespace purser::server
