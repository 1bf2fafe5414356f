// Kubernetes' Pod Security Standards, checked on what a team submits before Purser creates it
// with its own credentials (internal to src/exec).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace purser::exec {

// What a pod template asks for that Kubernetes' Pod Security Standards forbid at "baseline" (host
// namespaces, host paths and ports, privileged containers, capabilities beyond the default set,
// an unmasked /proc, unconfined seccomp or AppArmor, SELinux users, roles and types outside the
// container ones, sysctls outside the namespaced safe set) and, with `restricted`, at "restricted"
// too (volumes beyond the ephemeral and projected kinds, privilege escalation, root, no seccomp
// profile, capabilities not dropped); empty when nothing. Purser creates submitted objects with its
// own credentials: a team must not get through Purser what the platform team would not let it
// apply. A service account token is never mounted unless `tokens` lets a template ask for one:
// where the template does not say, automountServiceAccountToken is set false.
std::string podSecurityViolation(nlohmann::json& pod_spec, bool restricted, bool tokens);

}  // namespace purser::exec
