// Kubernetes' Pod Security Standards: see pod_security.h.
#include "exec/pod_security.h"

#include <set>
#include <string_view>

#include <fmt/format.h>

#include "common/json.h"

namespace purser::exec {

using nlohmann::json;

std::string podSecurityViolation(json& pod_spec, bool restricted, bool tokens) {
  if (!pod_spec.is_object()) return {};
  for (const char* host : {"hostNetwork", "hostPID", "hostIPC"}) {
    if (pod_spec.value(host, json()) == true) return fmt::format("spec.{}", host);
  }
  if (!tokens) {
    if (pod_spec.value("automountServiceAccountToken", json()) == true) {
      return "a service account token (automountServiceAccountToken)";
    }
    for (const char* field : {"serviceAccountName", "serviceAccount"}) {
      const json v = pod_spec.value(field, json());
      if (v.is_string() && !v.get<std::string>().empty() && v.get<std::string>() != "default") {
        return fmt::format("service account {}", writeJson(v));
      }
    }
    pod_spec["automountServiceAccountToken"] = false;
  }
  static const std::set<std::string> kRestrictedVolumes = {
      "configMap", "csi",   "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
      "projected", "secret"};
  for (const auto& v : pod_spec.value("volumes", json::array())) {
    if (!v.is_object()) continue;
    const std::string name = v.value("name", "?");
    if (v.contains("hostPath")) return fmt::format("a hostPath volume ({})", name);
    if (!restricted) continue;
    for (const auto& [kind, _] : v.items()) {
      if (kind != "name" && kRestrictedVolumes.count(kind) == 0) {
        return fmt::format("a {} volume ({})", kind, name);
      }
    }
  }
  static const std::set<std::string> kSafeSysctls = {"kernel.shm_rmid_forced",
                                                     "net.ipv4.ip_local_port_range",
                                                     "net.ipv4.ip_unprivileged_port_start",
                                                     "net.ipv4.tcp_syncookies",
                                                     "net.ipv4.ping_group_range",
                                                     "net.ipv4.ip_local_reserved_ports",
                                                     "net.ipv4.tcp_keepalive_time",
                                                     "net.ipv4.tcp_fin_timeout",
                                                     "net.ipv4.tcp_keepalive_intvl",
                                                     "net.ipv4.tcp_keepalive_probes"};
  static const std::set<std::string> kSelinuxTypes = {"", "container_t", "container_init_t",
                                                      "container_kvm_t", "container_engine_t"};
  // What one securityContext (the pod's or a container's) asks that baseline forbids.
  auto contextViolation = [](const json& sc) -> std::string {
    if (!sc.is_object()) return {};
    const json seccomp = sc.value("seccompProfile", json::object());
    if (seccomp.is_object() && seccomp.value("type", "") == "Unconfined") {
      return "an unconfined seccomp profile";
    }
    const json apparmor = sc.value("appArmorProfile", json::object());
    if (apparmor.is_object() && apparmor.value("type", "") == "Unconfined") {
      return "an unconfined AppArmor profile";
    }
    const json selinux = sc.value("seLinuxOptions", json::object());
    if (selinux.is_object()) {
      if (!selinux.value("user", "").empty() || !selinux.value("role", "").empty()) {
        return "an SELinux user or role";
      }
      if (kSelinuxTypes.count(selinux.value("type", "")) == 0) return "an SELinux type";
    }
    const json windows = sc.value("windowsOptions", json::object());
    if (windows.is_object() && windows.value("hostProcess", false) == true) {
      return "a Windows host process";
    }
    if (sc.value("procMount", "Default") != "Default") return "an unmasked /proc";
    return {};
  };
  const json pod_sc = pod_spec.value("securityContext", json::object());
  if (std::string why = contextViolation(pod_sc); !why.empty()) {
    return why + " (spec.securityContext)";
  }
  if (pod_sc.is_object()) {
    for (const auto& sysctl : pod_sc.value("sysctls", json::array())) {
      const std::string name = sysctl.is_object() ? sysctl.value("name", "") : "";
      if (kSafeSysctls.count(name) == 0) return fmt::format("sysctl {}", writeJson(name));
    }
  }
  auto podSays = [&](const char* field) {
    return pod_sc.is_object() ? pod_sc.value(field, json()) : json();
  };
  static const std::set<std::string> kDefaultCaps = {
      "AUDIT_WRITE",      "CHOWN",   "DAC_OVERRIDE", "FOWNER",  "FSETID", "KILL",      "MKNOD",
      "NET_BIND_SERVICE", "SETFCAP", "SETGID",       "SETPCAP", "SETUID", "SYS_CHROOT"};
  for (const char* list : {"containers", "initContainers", "ephemeralContainers"}) {
    for (const auto& c : pod_spec.value(list, json::array())) {
      if (!c.is_object()) continue;
      const std::string name = c.value("name", "?");
      const json sc = c.value("securityContext", json::object());
      if (sc.is_object() && sc.value("privileged", false) == true) {
        return fmt::format("a privileged container ({})", name);
      }
      if (std::string why = contextViolation(sc); !why.empty()) {
        return fmt::format("{} for container {}", why, name);
      }
      const json caps = sc.is_object() ? sc.value("capabilities", json::object()) : json();
      if (caps.is_object()) {
        for (const auto& cap : caps.value("add", json::array())) {
          const bool allowed = cap.is_string() && (restricted ? cap == "NET_BIND_SERVICE"
                                                              : kDefaultCaps.count(cap) > 0);
          if (!allowed) return fmt::format("capability {} for container {}", writeJson(cap), name);
        }
      }
      for (const auto& port : c.value("ports", json::array())) {
        if (port.is_object() && port.value("hostPort", 0) != 0) {
          return fmt::format("a host port for container {}", name);
        }
      }
      if (!restricted) continue;
      auto says = [&](const char* field) {
        const json v = sc.is_object() ? sc.value(field, json()) : json();
        return v.is_null() ? podSays(field) : v;
      };
      if (!sc.is_object() || sc.value("allowPrivilegeEscalation", json()) != false) {
        return fmt::format(
            "privilege escalation for container {} (set allowPrivilegeEscalation: "
            "false)",
            name);
      }
      if (says("runAsNonRoot") != true) {
        return fmt::format("root for container {} (set runAsNonRoot: true)", name);
      }
      if (says("runAsUser") == 0) return fmt::format("uid 0 for container {}", name);
      const json seccomp = says("seccompProfile");
      const std::string type = seccomp.is_object() ? seccomp.value("type", "") : "";
      if (type != "RuntimeDefault" && type != "Localhost") {
        return fmt::format(
            "no seccomp profile for container {} (set seccompProfile: "
            "{{type: RuntimeDefault}})",
            name);
      }
      bool drops_all = false;
      if (caps.is_object()) {
        for (const auto& cap : caps.value("drop", json::array())) drops_all |= cap == "ALL";
      }
      if (!drops_all) {
        return fmt::format("capabilities kept by container {} (drop ALL)", name);
      }
    }
  }
  return {};
}

}  // namespace purser::exec
