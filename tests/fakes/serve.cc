#include "fakes/serve.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fakes/raw_client.h"

namespace purser::testing {

Served startServe(const std::string& binary, const TempDir& dir, const std::string& config,
                  const std::string& admin_key, int threads) {
  writeFile(dir.file("purser.yaml"),
            "listen: 127.0.0.1:0\nthreads: " + std::to_string(threads) + "\n" + config);
  Served s;
  s.process = std::make_unique<Process>(
      std::vector<std::string>{binary, "serve", "--config", dir.file("purser.yaml"), "--data",
                               dir.file("var")},
      "", std::vector<std::string>{"PURSER_ADMIN_KEY=" + admin_key});
  if (auto line = s.process->waitForStdout("purser: listening on ")) {
    s.port = portFromListeningLine(*line);
  }
  return s;
}

std::string chatRouteConfig(uint16_t upstream_port) {
  return "providers:\n  - {name: p, kind: openai, base_url: http://127.0.0.1:" +
         std::to_string(upstream_port) +
         "/v1}\nroutes:\n  - {model: chat, targets: [{provider: p, model: m}]}\nprices:\n  - "
         "{provider: p, model: m, input_per_mtok: \"10\", output_per_mtok: \"100\"}\n";
}

Member seedMember(uint16_t port, const std::string& admin_key) {
  const auto admin = [&](const std::string& path, const nlohmann::json& body,
                         const char* field) -> std::string {
    const RawResponse r =
        callJson(port, "POST", path, {"Authorization: Bearer " + admin_key}, body.dump());
    EXPECT_EQ(r.status, 201) << path << ": " << r.body;
    const auto answer = nlohmann::json::parse(r.body, nullptr, false);
    return answer.is_object() && answer.contains(field) && answer[field].is_string()
               ? answer[field].get<std::string>()
               : "";
  };
  Member m;
  m.tenant = admin("/api/v1/tenants", {{"name", "acme"}}, "id");
  m.team = admin("/api/v1/teams", {{"tenant", m.tenant}, {"name", "ml"}}, "id");
  m.user = admin("/api/v1/users", {{"tenant", m.tenant}, {"team", m.team}, {"name", "dana"}}, "id");
  m.key =
      admin("/api/v1/keys", {{"owner", {{"kind", "user"}, {"id", m.user}}}, {"name", "k"}}, "key");
  return m;
}

}  // namespace purser::testing
