// The one API client of tests over loopback: a JSON request with a bearer key, on a fresh
// connection, and the answer with its body parsed (a body that is not JSON parses as discarded;
// `text` keeps it as it came).
//   testing::ApiReply r = testing::callApi(port, "POST", "/api/v1/tenants", key, {{"name", "a"}});
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fakes/raw_client.h"

namespace purser::testing {

struct ApiReply {
  int status = 0;                              // 0: nothing was sent or nothing came back
  std::map<std::string, std::string> headers;  // lower-case names
  std::string text;
  nlohmann::json body;
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
};

// `key` empty: no Authorization header. `body` null: no body. `headers`: more, "Name: value".
inline ApiReply callApi(uint16_t port, const std::string& method, const std::string& path,
                        const std::string& key, const nlohmann::json& body = nullptr,
                        std::vector<std::string> headers = {}) {
  if (!key.empty()) headers.insert(headers.begin(), "Authorization: Bearer " + key);
  const RawResponse r =
      callJson(port, method, path, headers, body.is_null() ? std::string() : body.dump());
  ApiReply out{r.status, r.headers, r.body, nlohmann::json::parse(r.body, nullptr, false)};
  return out;
}

}  // namespace purser::testing
