#include "fleet/engine.h"

#include <algorithm>
#include <memory>
#include <set>
#include <utility>

#include "fleet/engine_impl.h"

namespace purser::fleet {

bool isDnsLabel(std::string_view s) {
  const auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (s.empty() || s.size() > 63 || !alnum(s.front()) || !alnum(s.back())) return false;
  return std::all_of(s.begin(), s.end(), [&](char c) { return alnum(c) || c == '-'; });
}

bool isDnsSubdomain(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  for (size_t start = 0;;) {
    const size_t dot = s.find('.', start);
    if (!isDnsLabel(s.substr(start, dot == std::string_view::npos ? dot : dot - start))) {
      return false;
    }
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

bool tolerates(const std::vector<Toleration>& tolerations, const Taint& taint) {
  for (const auto& t : tolerations) {
    if (!t.effect.empty() && t.effect != taint.effect) continue;
    if (t.op == "Exists") {
      if (t.key.empty() || t.key == taint.key) return true;
    } else if (t.key == taint.key && t.value == taint.value) {
      return true;
    }
  }
  return false;
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

Result<std::unique_ptr<Engine>> Engine::create(World world, EngineOptions options) {
  auto impl = std::make_unique<Impl>(std::move(world), options);
  PURSER_TRY(impl->build());
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Result<void> Engine::addAdmitted(Workload workload) {
  return impl_->addAdmitted(std::move(workload));
}
Result<void> Engine::submit(Workload workload) { return impl_->submit(std::move(workload)); }
Result<void> Engine::finish(const std::string& name) { return impl_->finish(name); }
CycleResult Engine::cycle() { return impl_->cycle(); }
CycleResult Engine::runUntilStable(int64_t max_cycles) { return impl_->runUntilStable(max_cycles); }
Result<std::vector<std::pair<std::string, std::string>>> Engine::preemptionTargets(
    const Workload& incoming, const std::string& cluster_queue, const GivenAssignment& given) {
  return impl_->preemptionTargets(incoming, cluster_queue, given);
}
std::optional<WorkloadStatus> Engine::status(const std::string& name) const {
  return impl_->status(name);
}
std::vector<std::string> Engine::workloadNames() const { return impl_->workloadNames(); }
Result<void> Engine::hold(const std::string& name, const std::string& reason,
                          const std::string& message) {
  return impl_->hold(name, reason, message);
}
Result<void> Engine::release(const std::string& name) { return impl_->release(name); }
Result<void> Engine::stop(const std::string& name, const std::string& reason,
                          const std::string& message) {
  return impl_->stop(name, reason, message);
}
void Engine::reconsider() {
  std::set<int> roots;
  for (const auto& q : impl_->cqs_) roots.insert(impl_->root_of_[static_cast<size_t>(q.node)]);
  for (int r : roots) {
    impl_->retryTree(r);
    ++impl_->tree_version_[static_cast<size_t>(r)];  // what was nominated may now be otherwise
  }
}
void Engine::setNamespace(const std::string& name, std::map<std::string, std::string> labels) {
  impl_->setNamespace(name, std::move(labels));
}
bool Engine::hasNamespace(const std::string& name) const {
  return impl_->world_.namespaces.count(name) != 0;
}
std::vector<QueueStatus> Engine::queues() const { return impl_->queues(); }
Result<Explanation> Engine::explain(const std::string& name) { return impl_->explain(name); }
const std::vector<Event>& Engine::events() const { return impl_->events_; }
void Engine::setTime(int64_t now_ms) { impl_->now_ms_ = std::max(impl_->now_ms_, now_ms); }
std::vector<Event> Engine::takeEvents() { return std::exchange(impl_->events_, {}); }
int64_t Engine::cycles() const { return impl_->cycles_; }

}  // namespace purser::fleet
