// ApiClient: the CLI's blocking client for Purser's admin REST API. One request at a time, on a
// private io_context; errors come back as the server's problem detail.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

#include "common/result.h"

namespace purser::cli {

struct ApiReply {
  int status = 0;
  nlohmann::json body;  // parsed (a string when the body is not JSON)
  std::string text;     // the body as it came
};

class ApiClient {
 public:
  // `server`: base URL such as http://127.0.0.1:8080; `key`: the API key (or sign-in token) to
  // send, "" for none. Over HTTPS it reads PURSER_CA_FILE, PURSER_CLIENT_CERT and
  // PURSER_CLIENT_KEY.
  ApiClient(std::string server, std::string key);
  ~ApiClient();

  // Any HTTP status is a reply; only failing to talk to the server at all is an error.
  Result<ApiReply> call(const std::string& method, const std::string& path,
                        const nlohmann::json& body = nullptr);
  // The same with a body sent as it is (a YAML file, say), with its content type.
  Result<ApiReply> callText(const std::string& method, const std::string& path,
                            const std::string& body, const std::string& content_type);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// A human-readable line for an error reply: "404 Not Found: team \"x\" not found (field: team)".
std::string describeProblem(const ApiReply& reply);

}  // namespace purser::cli
