// KubeApi: a small blocking client for the Kubernetes API server — JSON requests and watch
// streams over HTTP/1.1 or HTTPS (verifying the server against its CA unless told not to) with a
// bearer token or a client certificate — spoken through Purser's one HTTP client (http/client.h).
// One connection per request; a watch holds its own until the server ends it or `stop` is set.
// Thread-safe: each call runs on its caller's thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "common/clock.h"
#include "common/result.h"
#include "http/client.h"

namespace purser::exec {

struct KubeApiOptions {
  std::string server;   // https://host:port or http://host:port
  std::string token;    // bearer token; empty: none
  std::string ca_file;  // PEM CA bundle for https; empty: ca_pem, else the system's
  std::string ca_pem;   // the CA bundle itself (PEM), as a kubeconfig carries it
  std::string client_cert_pem, client_key_pem;  // a client certificate and its key (PEM)
  bool insecure = false;  // https without verifying the server (tests and labs only)
  Duration timeout = std::chrono::seconds(30);
};

struct KubeReply {
  int status = 0;
  std::string body;
};

class KubeApi {
 public:
  static Result<std::unique_ptr<KubeApi>> create(KubeApiOptions options);
  ~KubeApi();

  // One request; kUnavailable when the server cannot be reached or answers nothing.
  Result<KubeReply> call(const std::string& method, const std::string& path,
                         const std::string& body = "",
                         const std::string& content_type = "application/json");
  // A watch: GET `path`, then `on_line` for each line of the streamed body until the server ends
  // it, `stop` is set (checked every second) or on_line returns false. The reply's status (the
  // body is read only when it is not 200).
  Result<KubeReply> watch(const std::string& path,
                          const std::function<bool(const std::string&)>& on_line,
                          const std::atomic<bool>& stop);

 private:
  explicit KubeApi(KubeApiOptions options);
  http::ClientRequest request(http::Method method, const std::string& path) const;
  KubeApiOptions options_;
  std::string base_;            // scheme://host:port
  http::ClientOptions client_;  // the timeouts every call's client is made with
  // The cluster's CA and Purser's client certificate, read and checked once and shared by every
  // call (null for http://).
  std::shared_ptr<const http::TlsProfile> tls_;
};

}  // namespace purser::exec
