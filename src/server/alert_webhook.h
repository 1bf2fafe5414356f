// The budget alerts' webhook (alerts.webhook_url): each alert the ledger raises is POSTed there as
// JSON — {type: "budget.alert", wallet, tenant, threshold, spent, limit, at, window?} — once, best
// effort, with a 10-second timeout; a failure is logged, never retried (the alert's audit entry
// is the record).
//
// Thread-safety: post() may be called from any thread. A call on an HTTP worker sends from that
// worker with its pooled client; any other thread's call is sent from worker 0.
#pragma once

#include <string>
#include <vector>

#include "common/clock.h"
#include "http/client.h"
#include "http/workers.h"
#include "ledger/records.h"

namespace purser::server {

class AlertWebhook final : public ledger::AlertSink {
 public:
  // An empty `url` posts nothing.
  AlertWebhook(const Clock& clock, std::string url, http::Workers& workers,
               http::WorkerLocal<http::HttpClient>& clients);

  void post(const std::string& tenant_id, const std::vector<ledger::Alert>& alerts) override;

  // The JSON body of one alert, as posted.
  static std::string body(const ledger::Alert& alert, const std::string& tenant_id, SystemTime at);

 private:
  const Clock& clock_;
  const std::string url_;
  http::Workers& workers_;
  http::WorkerLocal<http::HttpClient>& clients_;
};

}  // namespace purser::server
