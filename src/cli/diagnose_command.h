// `purser diagnose`: names the cause of a slow route, a failing model, an idle GPU or a stuck
// job, with its evidence. Read-only.
//   purser diagnose KIND [NAME] [--symptom S] [--since 30m] [--json]
//                                         asks the server (GET /api/v1/diagnose) about its own
//                                         live state: route, deployment, workload NS/NAME,
//                                         queue, team, user, node NAME, or fleet
//   purser diagnose --case FILE           answers one incident case (docs/incidents.md)
//   purser diagnose --score FILE|DIR...   answers judged cases and scores them
#pragma once

#include "cli/cli.h"

namespace purser::cli {

void registerDiagnoseCommand(CLI::App& root, int& exit_code);

}  // namespace purser::cli
