// Live diagnosis over HTTP: the question parsed and checked here, the case gathered and answered
// by the Investigator (diagnose_live/investigator.h) over Purser's own scraped series, gateway
// events, fleet events and audit entries. Read-only: GET only, nothing is changed and nothing
// outside is called.
//
//   GET /api/v1/diagnose?kind=route&name=chat-default&symptom=slow&since=30m
//     kind     route | deployment | workload (NAME is NAMESPACE/NAME) | queue | team | user |
//              node | fleet (no name)
//     symptom  slow | errors | pending | over_budget | idle | any (default)
//     since    how far back (default 30m; at most what the series store keeps)
//     narrate  true (default when diagnose.narrator is configured) | false: a plain-language
//              summary of the findings by the narrator route's model, asked as the caller and
//              metered to the caller's wallets, in "narration": {"route", "text"} or
//              {"route", "error", "status"}; the findings are the same either way
//     format   json (default) | case: instead of the findings, the case the engine would answer
//              from, as an incident file (application/yaml) that `purser diagnose --case FILE`
//              replays; a platform admin's only, since it holds every tenant's series
//   -> {"question": {...}, "window": {"start", "end"}, "findings": [...]}   (incidents.md §3)
//
// Scoping: a platform admin asks about anything and sees every name. Anyone else asks only about
// what they may see — routes they may use and the providers serving them, their tenant's teams,
// queues and workloads as the fleet API scopes them (a team's own for team leads and members),
// nodes and the fleet as a whole — and anything else is 404, as if it did not exist. In the
// answer, every name of another tenant's object (workload, namespace, team, user, key, wallet,
// route, model server) is replaced with a placeholder such as "another tenant's workload".
//
// Thread-safety: as admin_api.h.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "api/admin_api.h"
#include "common/result.h"
#include "diagnose_live/investigator.h"
#include "http/router.h"
#include "workloads/fleet_service.h"

namespace purser::api {

using diagnose_live::ProviderFacts;

struct DiagnoseOptions {
  // The fleet this replica leads now; none (or null): no workloads, queues or fleet events.
  std::function<std::shared_ptr<workloads::FleetService>()> fleet;
  std::vector<ProviderFacts> providers;
  size_t max_case_bytes = 48u << 20;  // format=case: a larger case is refused (422)
  // Narration (diagnose_live/narrate.h): the route whose model summarises the findings, through the
  // gateway on the same router, as the caller ("" for none), and the summary's output cap.
  std::string narrator_route;
  int64_t narrator_max_tokens = 400;
};

Result<void> addDiagnoseRoutes(http::Router& router, const Services& services,
                               DiagnoseOptions options);

}  // namespace purser::api
