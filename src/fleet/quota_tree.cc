// The quota tree: ClusterQueues and Cohorts as one tree of nodes, each with its nominal quota,
// borrowing and lending limits per flavor and resource, and its usage; what a node may still
// use (Kueue's cache and snapshot). See engine_impl.h.
#include "fleet/engine_impl.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <memory>
#include <set>
#include <unordered_map>
#include <utility>

namespace purser::fleet {

auto Engine::Impl::build() -> Result<void> {
  // Flavors and resources.
  for (const auto& f : world_.flavors) {
    if (flavor_index_.count(f.name) != 0) {
      return fail(invalidArgument(fmt::format("ResourceFlavor \"{}\" is defined twice", f.name)));
    }
    flavor_index_[f.name] = static_cast<int>(flavor_index_.size());
  }
  const auto noteResources = [&](const std::vector<ResourceGroup>& groups) {
    for (const auto& g : groups) {
      for (const auto& r : g.covered) resourceIndex(r, true);
      for (const auto& f : g.flavors) {
        for (const auto& [r, _] : f.resources) resourceIndex(r, true);
      }
    }
  };
  for (const auto& c : world_.cohorts) noteResources(c.quotas);
  for (const auto& cq : world_.cluster_queues) noteResources(cq.resource_groups);
  nfr_ = static_cast<int>(flavor_index_.size() * resources_.size());

  // Cohorts (declared ones, then the implicit roots ClusterQueues name).
  std::unordered_map<std::string, int> cohort_node;
  for (const auto& c : world_.cohorts) {
    if (cohort_node.count(c.name) != 0) {
      return fail(invalidArgument(fmt::format("Cohort \"{}\" is defined twice", c.name)));
    }
    const int n = newNode(c.name, false);
    nodes_[n].weight_milli = c.fair_weight_milli;
    PURSER_TRY(applyQuotas(nodes_[n], c.quotas, "Cohort \"" + c.name + "\""));
    cohort_node[c.name] = n;
  }
  for (const auto& c : world_.cohorts) {
    if (c.parent.empty()) continue;
    auto it = cohort_node.find(c.parent);
    if (it == cohort_node.end()) {
      it = cohort_node.emplace(c.parent, newNode(c.parent, false)).first;
    }
    nodes_[cohort_node[c.name]].parent = it->second;
  }
  // Cycles in the cohort tree.
  for (const auto& [name, n] : cohort_node) {
    int slow = n, steps = 0;
    for (int p = nodes_[n].parent; p >= 0; p = nodes_[p].parent) {
      if (p == slow || ++steps > static_cast<int>(nodes_.size())) {
        return fail(invalidArgument(fmt::format("Cohort \"{}\": its parents form a cycle", name)));
      }
    }
  }
  for (const auto& spec : world_.cluster_queues) {
    if (cq_index_.count(spec.name) != 0) {
      return fail(invalidArgument(fmt::format("ClusterQueue \"{}\" is defined twice", spec.name)));
    }
    Cq cq{.active = std::set<int, QueueOrder>(QueueOrder{this})};
    cq.spec = spec;
    cq.node = newNode(spec.name, true);
    nodes_[cq.node].cq = static_cast<int>(cqs_.size());
    nodes_[cq.node].weight_milli = spec.fair_weight_milli;
    for (size_t g = 0; g < spec.resource_groups.size(); ++g) {
      const auto& group = spec.resource_groups[g];
      for (const auto& r : group.covered) {
        if (cq.group_of.count(r) != 0) {
          return fail(invalidArgument(
              fmt::format("ClusterQueue \"{}\": resource \"{}\" is covered by two resource groups",
                          spec.name, r)));
        }
        cq.group_of[r] = static_cast<int>(g);
        if (r == "pods") cq.covers_pods = true;
      }
      for (const auto& f : group.flavors) {
        for (const auto& [r, _] : f.resources) {
          if (std::find(group.covered.begin(), group.covered.end(), r) == group.covered.end()) {
            return fail(invalidArgument(fmt::format(
                "ClusterQueue \"{}\": flavor \"{}\" sets quota for \"{}\", which its resource "
                "group does not cover",
                spec.name, f.flavor, r)));
          }
        }
        if (!f.resources.empty()) {
          for (const auto& r : group.covered) {
            if (f.resources.count(r) == 0) {
              return fail(invalidArgument(fmt::format(
                  "ClusterQueue \"{}\": flavor \"{}\" lists no quota for covered resource "
                  "\"{}\"",
                  spec.name, f.flavor, r)));
            }
          }
        }
      }
    }
    PURSER_TRY(
        applyQuotas(nodes_[cq.node], spec.resource_groups, "ClusterQueue \"" + spec.name + "\""));
    if (!spec.cohort.empty()) {
      auto it = cohort_node.find(spec.cohort);
      if (it == cohort_node.end()) {
        it = cohort_node.emplace(spec.cohort, newNode(spec.cohort, false)).first;
      }
      nodes_[cq.node].parent = it->second;
    }
    cq_index_[spec.name] = static_cast<int>(cqs_.size());
    cqs_.push_back(std::move(cq));
  }
  for (size_t n = 0; n < nodes_.size(); ++n) {
    if (nodes_[n].parent >= 0) nodes_[nodes_[n].parent].children.push_back(static_cast<int>(n));
  }
  // Subtree quotas bottom-up (children before parents: deepest first).
  std::vector<int> order(nodes_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::vector<int> depth(nodes_.size(), 0);
  for (size_t n = 0; n < nodes_.size(); ++n) {
    for (int p = nodes_[n].parent; p >= 0; p = nodes_[p].parent) ++depth[n];
  }
  std::sort(order.begin(), order.end(), [&](int a, int b) { return depth[a] > depth[b]; });
  for (int n : order) {
    Node& node = nodes_[n];
    for (int fr = 0; fr < nfr_; ++fr) {
      Amount sub = node.nominal[fr];
      for (int c : node.children) sub += nodes_[c].subtree[fr] - nodes_[c].local[fr];
      node.subtree[fr] = sub;
      node.local[fr] = node.ll[fr] == kNone ? 0 : std::max<Amount>(0, sub - node.ll[fr]);
    }
    int h = node.is_cq ? 0 : std::min<int>(static_cast<int>(node.children.size()), 1);
    for (int c : node.children) {
      if (!nodes_[c].is_cq) h = std::max(h, nodes_[c].height + 1);
    }
    node.height = h;
  }
  for (const auto& lq : world_.local_queues) {
    if (cq_index_.count(lq.cluster_queue) == 0) {
      return fail(invalidArgument(fmt::format("LocalQueue \"{}/{}\": no ClusterQueue named \"{}\"",
                                              lq.namespace_, lq.name, lq.cluster_queue)));
    }
    local_queues_[lq.namespace_ + "/" + lq.name] = cq_index_[lq.cluster_queue];
  }
  for (const auto& pc : world_.priority_classes) priority_classes_[pc.name] = pc.value;
  root_of_.resize(nodes_.size());
  for (size_t n = 0; n < nodes_.size(); ++n) {
    int r = static_cast<int>(n);
    while (nodes_[u(r)].parent >= 0) r = nodes_[u(r)].parent;
    root_of_[n] = r;
  }
  tree_version_.assign(nodes_.size(), 0);
  memo_.resize(cqs_.size());
  return {};
}

auto Engine::Impl::applyQuotas(Node& node, const std::vector<ResourceGroup>& groups,
                               const std::string& what) -> Result<void> {
  for (const auto& g : groups) {
    for (const auto& f : g.flavors) {
      auto fi = flavor_index_.find(f.flavor);
      if (fi == flavor_index_.end()) {
        return fail(
            invalidArgument(fmt::format("{}: no ResourceFlavor named \"{}\"", what, f.flavor)));
      }
      for (const auto& [r, q] : f.resources) {
        const int i = fr(fi->second, resourceIndex(r, false));
        node.nominal[static_cast<size_t>(i)] = q.nominal;
        if (q.borrowing_limit) node.bl[static_cast<size_t>(i)] = *q.borrowing_limit;
        if (q.lending_limit) {
          if (*q.lending_limit > q.nominal && node.is_cq) {
            return fail(invalidArgument(fmt::format(
                "{}: the lending limit of {} in flavor \"{}\" is above its nominal quota", what, r,
                f.flavor)));
          }
          node.ll[static_cast<size_t>(i)] = *q.lending_limit;
        }
      }
    }
  }
  return {};
}

}  // namespace purser::fleet
