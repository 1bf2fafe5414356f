// Unit tests of the admission engine beyond the conformance cases: validation of the world.
#include <gtest/gtest.h>

#include "fleet/engine.h"
#include "fleet/scenario.h"

namespace purser::fleet {
namespace {

TEST(EngineTest, RejectsABadWorldWithTheObjectAndReason) {
  const auto errorOf = [](const std::string& yaml) {
    auto s = parseScenario("mode: single_cycle\n" + yaml, "w.yaml");
    if (!s) return s.error().message;
    auto r = runScenario(*s);
    return r ? std::string() : r.error().message;
  };
  EXPECT_NE(errorOf("flavors: [{name: a}]\ncluster_queues:\n  - name: q\n    resource_groups:\n"
                    "      - covered: [cpu]\n        flavors: [{flavor: nope, resources: {cpu: "
                    "{nominal: \"1\"}}}]\n")
                .find("no ResourceFlavor named \"nope\""),
            std::string::npos);
  EXPECT_NE(errorOf("cohorts: [{name: a, parent: b}, {name: b, parent: a}]\n").find("cycle"),
            std::string::npos);
  EXPECT_NE(errorOf("flavors: [{name: a}]\ncluster_queues:\n  - name: q\n    resource_groups:\n"
                    "      - covered: [cpu, memory]\n        flavors: [{flavor: a, resources: "
                    "{cpu: {nominal: \"1\"}}}]\n")
                .find("lists no quota for covered resource \"memory\""),
            std::string::npos);
  EXPECT_NE(errorOf("flavors: [{name: a}]\ncluster_queues: [{name: q}]\n"
                    "local_queues: [{namespace: n, name: l, cluster_queue: q}]\n"
                    "pending: [{name: n/w, local_queue: missing, pod_sets: [{name: m, count: 1, "
                    "requests: {cpu: \"1\"}}]}]\n")
                .find("no LocalQueue named \"missing\""),
            std::string::npos);
  EXPECT_NE(errorOf("flavors: [{name: a}]\ncluster_queues:\n  - name: q\n    resource_groups:\n"
                    "      - covered: [cpu]\n        flavors: [{flavor: a, resources: {cpu: "
                    "{nominal: \"-1\"}}}]\n")
                .find("may not be negative"),
            std::string::npos);
}

}  // namespace
}  // namespace purser::fleet
