// The budget alerts' webhook: see alert_webhook.h.
#include "server/alert_webhook.h"

#include <utility>

#include <spdlog/spdlog.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include "common/json.h"

namespace purser::server {

namespace asio = boost::asio;

namespace {

// Sends one alert from the worker it runs on; failures are logged.
asio::awaitable<void> deliver(http::WorkerLocal<http::HttpClient>& clients, std::string url,
                              std::string body) {
  http::ClientRequest req;
  req.method = http::Method::kPost;
  req.url = std::move(url);
  req.headers.add("Content-Type", "application/json");
  req.body = std::move(body);
  req.timeout = std::chrono::seconds(10);
  auto res = co_await clients.current().request(std::move(req));
  if (!res) {
    spdlog::warn("alerts: webhook failed: {}", res.error().message);
  } else if (res->status >= 300) {
    spdlog::warn("alerts: webhook answered {}", res->status);
  }
}

}  // namespace

AlertWebhook::AlertWebhook(const Clock& clock, std::string url, http::Workers& workers,
                           http::WorkerLocal<http::HttpClient>& clients)
    : clock_(clock), url_(std::move(url)), workers_(workers), clients_(clients) {}

std::string AlertWebhook::body(const ledger::Alert& a, const std::string& tenant_id,
                               SystemTime at) {
  Json payload = {{"type", "budget.alert"},      {"wallet", a.wallet_id},
                  {"tenant", tenant_id},         {"threshold", a.threshold},
                  {"spent", a.spent.toString()}, {"limit", a.limit.toString()},
                  {"at", formatRfc3339(at)}};
  if (a.window.end != SystemTime::max()) {
    payload["window"] = {{"start", formatRfc3339(a.window.start)},
                         {"end", formatRfc3339(a.window.end)}};
  }
  return writeJson(payload);
}

void AlertWebhook::post(const std::string& tenant_id, const std::vector<ledger::Alert>& alerts) {
  if (url_.empty() || alerts.empty() || workers_.size() == 0) return;
  const int current = http::Workers::currentIndex();
  asio::io_context& worker = workers_.context(current >= 0 ? static_cast<size_t>(current) : 0);
  const SystemTime at = clock_.now();
  for (const ledger::Alert& a : alerts) {
    asio::co_spawn(worker, deliver(clients_, url_, body(a, tenant_id, at)), asio::detached);
  }
}

}  // namespace purser::server
