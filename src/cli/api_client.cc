#include "cli/api_client.h"

#include <utility>

#include <optional>

#include <fmt/format.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <cstdlib>
#include <iostream>

#include "common/json.h"
#include "common/small_file.h"
#include "http/client.h"

namespace purser::cli {

class ApiClient::Impl {
 public:
  Impl(std::string server, std::string key)
      : server_(std::move(server)), key_(std::move(key)), client_(context_, options()) {
    while (!server_.empty() && server_.back() == '/') server_.pop_back();
  }

  // HTTPS: PURSER_CA_FILE adds a private CA to the system's trust store; PURSER_CLIENT_CERT
  // and PURSER_CLIENT_KEY (PEM files) are presented to a server that asks for a client
  // certificate. A file that cannot be read is named on stderr, and every request fails.
  static http::ClientOptions options() {
    http::ClientOptions o;
    o.connect_timeout = std::chrono::seconds(5);
    o.read_timeout = std::chrono::seconds(60);
    o.user_agent = "purser-cli";
    if (const char* ca = std::getenv("PURSER_CA_FILE"); ca != nullptr && *ca != '\0') {
      o.ca_file = ca;
    }
    const char* cert = std::getenv("PURSER_CLIENT_CERT");
    const char* key = std::getenv("PURSER_CLIENT_KEY");
    if (cert != nullptr && *cert != '\0') {
      // What cannot be read is said here; the requests then fail the TLS check.
      auto cert_pem = readSmallFile(cert, "PURSER_CLIENT_CERT");
      auto key_pem = readSmallFile(key != nullptr ? key : "", "PURSER_CLIENT_KEY");
      for (const auto* r : {&cert_pem, &key_pem}) {
        if (!*r) std::cerr << "purser: " << r->error().message << "\n";
      }
      o.client_cert_pem = cert_pem.value_or("");
      o.client_key_pem = key_pem.value_or("");
    }
    return o;
  }

  Result<ApiReply> call(const std::string& method, const std::string& path,
                        const nlohmann::json& body) {
    if (body.is_null()) return send(method, path, std::nullopt, "");
    return send(method, path, writeJson(body), "application/json");
  }

  Result<ApiReply> send(const std::string& method, const std::string& path,
                        const std::optional<std::string>& body, const std::string& content_type) {
    http::ClientRequest req;
    req.method = http::parseMethod(method);
    req.url = server_ + path;
    if (!key_.empty()) req.headers.add("Authorization", "Bearer " + key_);
    req.headers.add("Accept", "application/json");
    if (body) {
      req.headers.add("Content-Type", content_type);
      req.body = *body;
    }
    auto future =
        boost::asio::co_spawn(context_, client_.request(std::move(req)), boost::asio::use_future);
    context_.restart();
    context_.run();
    auto res = future.get();
    if (!res) {
      return fail(Error(res.error().code,
                        fmt::format("cannot reach {}: {}", server_, res.error().message)));
    }
    ApiReply out;
    out.status = res->status;
    out.text = res->body;
    out.body = parseJsonOrDiscarded(res->body);
    if (out.body.is_discarded()) out.body = res->body;
    return out;
  }

 private:
  std::string server_;
  std::string key_;
  boost::asio::io_context context_;
  http::HttpClient client_;
};

ApiClient::ApiClient(std::string server, std::string key)
    : impl_(std::make_unique<Impl>(std::move(server), std::move(key))) {}
ApiClient::~ApiClient() = default;

Result<ApiReply> ApiClient::call(const std::string& method, const std::string& path,
                                 const nlohmann::json& body) {
  return impl_->call(method, path, body);
}

Result<ApiReply> ApiClient::callText(const std::string& method, const std::string& path,
                                     const std::string& body, const std::string& content_type) {
  return impl_->send(method, path, body, content_type);
}

std::string describeProblem(const ApiReply& reply) {
  std::string text = fmt::format("{}", reply.status);
  if (reply.body.is_object()) {
    if (reply.body.contains("title")) text += " " + reply.body.value("title", "");
    if (reply.body.contains("detail")) text += ": " + reply.body.value("detail", "");
    if (reply.body.contains("field")) text += " (field: " + reply.body.value("field", "") + ")";
  } else if (reply.body.is_string()) {
    text += ": " + reply.body.get<std::string>();
  }
  return text;
}

}  // namespace purser::cli
