#include "config/kubeconfig.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "common/base64.h"
#include "common/small_file.h"
#include "config/yaml_reader.h"

namespace purser::config {

namespace {

std::string scalar(const YAML::Node& map, const char* key) {
  if (!map.IsMap()) return {};
  const YAML::Node n = map[key];
  return n.IsDefined() && n.IsScalar() ? n.Scalar() : std::string();
}

// The map named `name` in the list `key` of `root` ({name, <kind>: {...}}).
std::optional<YAML::Node> entry(const YAML::Node& root, const char* key, const char* kind,
                                const std::string& name) {
  const YAML::Node list = root[key];
  if (!list.IsDefined() || !list.IsSequence()) return std::nullopt;
  for (const auto& item : list) {
    if (!item.IsMap() || scalar(item, "name") != name) continue;
    const YAML::Node inner = item[kind];
    return inner.IsDefined() && inner.IsMap() ? inner : YAML::Node(YAML::NodeType::Map);
  }
  return std::nullopt;
}

bool has(const YAML::Node& map, const char* key) {
  const YAML::Node n = map[key];
  return n.IsDefined() && !n.IsNull();
}

Result<Kubeconfig> parse(const YAML::Node& root, const std::string& file,
                         const std::string& base_dir, const std::string& context);

}  // namespace

Result<Kubeconfig> parseKubeconfig(std::string_view text, const std::string& file,
                                   const std::string& base_dir, const std::string& context) {
  const YAML::Node root = PURSER_TRY_VALUE(parseYaml(text, file));
  try {
    return parse(root, file, base_dir, context);
  } catch (const YAML::Exception& e) {
    return fail(invalidArgument(fmt::format("kubeconfig {}: {}", file, e.what())));
  }
}

namespace {

Result<Kubeconfig> parse(const YAML::Node& root, const std::string& file,
                         const std::string& base_dir, const std::string& context) {
  const auto bad = [&](const std::string& why) {
    return invalidArgument(fmt::format("kubeconfig {}: {}", file, why));
  };
  if (!root.IsMap())
    return fail(bad("not a kubeconfig (expected a map with clusters, users and contexts)"));
  Kubeconfig out;
  out.context = context.empty() ? scalar(root, "current-context") : context;
  if (out.context.empty()) return fail(bad("no current-context; name the context to use"));
  const auto ctx_entry = entry(root, "contexts", "context", out.context);
  if (!ctx_entry) return fail(bad(fmt::format("no context named \"{}\"", out.context)));
  const YAML::Node& ctx = *ctx_entry;
  const std::string cluster_name = scalar(ctx, "cluster"), user_name = scalar(ctx, "user");
  out.namespace_ = scalar(ctx, "namespace");
  const auto cluster_entry = entry(root, "clusters", "cluster", cluster_name);
  if (!cluster_entry) {
    return fail(bad(fmt::format("context \"{}\" names cluster \"{}\", which is not in the file",
                                out.context, cluster_name)));
  }
  const YAML::Node& cluster = *cluster_entry;
  const auto path = [&](const std::string& p) {
    return std::filesystem::path(p).is_relative() ? (std::filesystem::path(base_dir) / p).string()
                                                  : p;
  };
  // A value given inline (base64 in FIELD-data) or as a file (FIELD).
  const auto material = [&](const YAML::Node& map, const char* field,
                            const char* what) -> Result<std::string> {
    const std::string data = scalar(map, (std::string(field) + "-data").c_str());
    if (!data.empty()) {
      auto decoded = base64Decode(data);
      if (!decoded) return fail(bad(fmt::format("{}-data is not base64", field)));
      return *decoded;
    }
    const std::string file_path = scalar(map, field);
    if (file_path.empty()) return std::string();
    return readSmallFile(path(file_path), what);
  };
  out.server = scalar(cluster, "server");
  if (out.server.empty()) {
    return fail(bad(fmt::format("cluster \"{}\" has no server", cluster_name)));
  }
  out.insecure = scalar(cluster, "insecure-skip-tls-verify") == "true";
  out.ca_pem = PURSER_TRY_VALUE(material(cluster, "certificate-authority", "the CA file"));
  if (user_name.empty()) return out;  // no credentials: anonymous
  const auto user_entry = entry(root, "users", "user", user_name);
  if (!user_entry) {
    return fail(bad(fmt::format("context \"{}\" names user \"{}\", which is not in the file",
                                out.context, user_name)));
  }
  const YAML::Node& user = *user_entry;
  if (has(user, "exec") || has(user, "auth-provider")) {
    return fail(bad(fmt::format(
        "user \"{}\" gets its credentials by running a program (exec or auth-provider), which "
        "Purser does not do; give Purser a service account's token (token_file) or a client "
        "certificate",
        user_name)));
  }
  if (has(user, "username") || has(user, "password")) {
    return fail(bad(fmt::format(
        "user \"{}\" uses basic authentication, which Kubernetes no longer supports; use a token "
        "or a client certificate",
        user_name)));
  }
  out.token = scalar(user, "token");
  if (out.token.empty() && !scalar(user, "tokenFile").empty()) {
    out.token = PURSER_TRY_VALUE(readSmallFile(path(scalar(user, "tokenFile")), "the token file"));
    while (!out.token.empty() && (out.token.back() == '\n' || out.token.back() == '\r')) {
      out.token.pop_back();
    }
  }
  out.client_cert_pem = PURSER_TRY_VALUE(material(user, "client-certificate", "the certificate"));
  out.client_key_pem = PURSER_TRY_VALUE(material(user, "client-key", "the key"));
  if (out.client_cert_pem.empty() != out.client_key_pem.empty()) {
    return fail(
        bad(fmt::format("user \"{}\" has a client certificate without its key, or a key "
                        "without its certificate",
                        user_name)));
  }
  return out;
}

}  // namespace

Result<Kubeconfig> readKubeconfig(const std::string& path, const std::string& context) {
  const std::string text = PURSER_TRY_VALUE(readSmallFile(path, "the kubeconfig"));
  return parseKubeconfig(text, path, std::filesystem::path(path).parent_path().string(), context);
}

}  // namespace purser::config
