// Views for the console (and anyone else) that join several parts: the model routes with their
// targets' health and their traffic, filtered to what the caller may see.
//
//   GET /api/v1/routes[?from=RFC3339]   routes, targets, health; requests, error rate,
//                                       latency p50/p95, tokens, cost per 1,000 requests
#pragma once

#include "api/admin_api.h"
#include "common/result.h"
#include "http/router.h"

namespace purser::api {

Result<void> addConsoleApiRoutes(http::Router& router, const Services& services);

}  // namespace purser::api
