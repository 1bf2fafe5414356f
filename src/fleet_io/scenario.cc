#include "fleet_io/scenario.h"

#include <fmt/format.h>

#include "common/quantity.h"
#include "fleet/engine.h"

namespace purser::fleet {

using nlohmann::json;

namespace {

json admissionJson(const Admission& a) {
  json pod_sets = json::object();
  for (const auto& ps : a.pod_sets) {
    json flavors = json::object();
    for (const auto& [res, flavor] : ps.flavors) flavors[res] = flavor;
    json usage = json::object();
    for (const auto& [res, amount] : ps.usage) usage[res] = Quantity::fromMilli(amount).toString();
    pod_sets[ps.name] = {{"count", ps.count}, {"flavors", flavors}, {"usage", usage}};
  }
  return {{"cluster_queue", a.cluster_queue}, {"pod_sets", pod_sets}};
}

// What happened since the previous checkpoint, and who is still waiting.
json outcome(const Engine& engine, const CycleResult& r) {
  json admitted = json::object();
  for (const auto& name : r.admitted) {
    auto s = engine.status(name);
    if (s && s->admission) admitted[name] = admissionJson(*s->admission);
  }
  json preempted = json::object();
  for (const auto& [name, reason] : r.preempted) preempted[name] = {{"reason", reason}};
  json pending = json::object();
  for (const auto& name : engine.workloadNames()) {
    auto s = engine.status(name);
    if (!s || s->state != WorkloadStatus::State::kPending) continue;
    json p = {{"reason", s->reason.empty() ? "WaitingForQuota" : s->reason},
              {"message", s->message.empty() ? "not yet considered by the scheduler" : s->message},
              {"queue_state", s->inadmissible ? "inadmissible" : "active"}};
    if (!s->attempted) p["never_attempted"] = true;
    pending[name] = p;
  }
  return {{"admitted", admitted}, {"preempted", preempted}, {"pending", pending}};
}

}  // namespace

Result<json> runScenario(const Scenario& s, CycleMode mode, RunStats* stats) {
  World world;
  world.flavors = s.flavors;
  world.namespaces = s.namespaces;
  world.cohorts = s.cohorts;
  world.cluster_queues = s.cluster_queues;
  world.local_queues = s.local_queues;
  EngineOptions options;
  options.mode = mode;  // conformance: Kueue's cycles exactly
  options.partial_admission = s.features.partial_admission;
  options.fair_sharing = s.features.fair_sharing;
  options.priority_sorting_within_cohort = s.features.priority_sorting_within_cohort;
  auto engine = PURSER_TRY_VALUE(Engine::create(world, options));
  for (const auto& w : s.admitted) PURSER_TRY(engine->addAdmitted(w));
  for (const auto& w : s.pending) PURSER_TRY(engine->submit(w));
  // Counts what each run of the engine decided.
  const auto counted = [&](CycleResult r) {
    if (stats != nullptr) {
      stats->decisions += static_cast<int64_t>(r.admitted.size() + r.preempted.size());
      stats->cycles = engine->cycles();
    }
    return r;
  };
  switch (s.mode) {
    case Mode::kSingleCycle:
      return outcome(*engine, counted(engine->cycle()));
    case Mode::kPreemptionTargets: {
      GivenAssignment given;
      for (const auto& [ps, a] : s.incoming->assignment) {
        GivenAssignment::PodSet g;
        g.count = a.count;
        for (const auto& [res, f] : a.flavors) g.flavors[res] = {f.flavor, f.preempt};
        given.pod_sets[ps] = g;
      }
      std::string cq = s.incoming->workload.cluster_queue;
      auto targets = PURSER_TRY_VALUE(engine->preemptionTargets(s.incoming->workload, cq, given));
      json preempted = json::object();
      for (const auto& [name, reason] : targets) preempted[name] = {{"reason", reason}};
      return json{
          {"admitted", json::object()}, {"preempted", preempted}, {"pending", json::object()}};
    }
    case Mode::kUntilStable: {
      json out = outcome(*engine, counted(engine->runUntilStable()));
      json steps = json::array();
      for (const auto& step : s.steps) {
        for (const auto& name : step.finish) PURSER_TRY(engine->finish(name));
        for (const auto& w : step.create) PURSER_TRY(engine->submit(w));
        steps.push_back(outcome(*engine, counted(engine->runUntilStable())));
      }
      out["steps"] = steps;
      return out;
    }
  }
  return fail(internalError("unknown scenario mode"));
}

}  // namespace purser::fleet
