// KubeApi: see kube_api.h. Each call runs the pooled HTTP client (http/client.h) on an io_context
// of its own, on the calling thread: the executors' threads block here, never a worker.
#include "exec/kube_api.h"

#include <utility>

#include <fmt/format.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <optional>

#include "http/client.h"

namespace purser::exec {

namespace asio = boost::asio;

namespace {

Error down(const std::string& what) {
  return Error(ErrorCode::kUnavailable, "the Kubernetes API cannot be reached: " + what);
}

constexpr size_t kMaxAnswer = 64 * 1024 * 1024;  // a list of every pod of a large cluster
constexpr size_t kMaxWatchEvent = 16 * 1024 * 1024;
constexpr size_t kMaxRefusal = 64 * 1024;  // what is kept of a watch's answer other than 200
// A watch the server keeps quiet this long ends, and its caller resumes it from the version it
// has (what the server's own timeoutSeconds would do).
constexpr auto kWatchQuiet = std::chrono::minutes(5);

}  // namespace

KubeApi::KubeApi(KubeApiOptions options) : options_(std::move(options)) {}

KubeApi::~KubeApi() = default;

Result<std::unique_ptr<KubeApi>> KubeApi::create(KubeApiOptions options) {
  std::unique_ptr<KubeApi> api(new KubeApi(std::move(options)));
  const KubeApiOptions& o = api->options_;
  std::string rest;
  bool tls = false;
  if (o.server.rfind("https://", 0) == 0) {
    tls = true;
    rest = o.server.substr(8);
  } else if (o.server.rfind("http://", 0) == 0) {
    rest = o.server.substr(7);
  } else {
    return fail(invalidArgument("the Kubernetes server must be an https:// or http:// URL"));
  }
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.empty() || rest.front() == ':' || rest.find('/') != std::string::npos) {
    return fail(invalidArgument("the Kubernetes server must be scheme://host[:port]"));
  }
  api->base_ = (tls ? "https://" : "http://") + rest;
  http::ClientOptions& c = api->client_;
  c.connect_timeout = o.timeout;
  c.write_timeout = o.timeout;
  c.read_timeout = o.timeout;
  c.max_response_bytes = kMaxAnswer;
  c.max_idle_per_host = 0;
  c.verify_tls = !o.insecure;
  c.ca_file = o.ca_file;
  c.ca_pem = o.ca_file.empty() ? o.ca_pem : std::string();
  // The cluster's CA, when one is named, is the only one trusted.
  c.system_trust = o.ca_file.empty() && o.ca_pem.empty();
  c.client_cert_pem = o.client_cert_pem;
  c.client_key_pem = o.client_key_pem;
  if (tls) {
    auto profile = http::makeTlsProfile(c);
    if (!profile) return fail(invalidArgument("Kubernetes: " + profile.error().message));
    api->tls_ = std::move(*profile);
  }
  // Each call's own client needs only the timeouts: its TLS is the profile's.
  c.ca_file.clear();
  c.ca_pem.clear();
  c.client_cert_pem.clear();
  c.client_key_pem.clear();
  return api;
}

http::ClientRequest KubeApi::request(http::Method method, const std::string& path) const {
  http::ClientRequest req;
  req.method = method;
  req.url = base_ + path;
  req.tls = tls_;
  req.headers.add("Accept", "application/json");
  if (!options_.token.empty()) req.headers.add("Authorization", "Bearer " + options_.token);
  return req;
}

Result<KubeReply> KubeApi::call(const std::string& method, const std::string& path,
                                const std::string& body, const std::string& content_type) {
  const http::Method m = http::parseMethod(method);
  if (m == http::Method::kOther) {
    return fail(invalidArgument(fmt::format("no such HTTP method: {}", method)));
  }
  http::ClientRequest req = request(m, path);
  if (!body.empty() || m == http::Method::kPost || m == http::Method::kPatch ||
      m == http::Method::kPut) {
    req.headers.add("Content-Type", content_type);
    req.body = body;
  }
  asio::io_context context;
  http::HttpClient client(context, client_);
  std::optional<Result<http::ClientResponse>> got;
  asio::co_spawn(
      context, [&]() -> asio::awaitable<void> { got = co_await client.request(std::move(req)); },
      asio::detached);
  context.run();
  if (!got || !*got) return fail(down(got ? got->error().message : "no answer"));
  return KubeReply{(*got)->status, std::move((*got)->body)};
}

Result<KubeReply> KubeApi::watch(const std::string& path,
                                 const std::function<bool(const std::string&)>& on_line,
                                 const std::atomic<bool>& stop) {
  http::ClientRequest req = request(http::Method::kGet, path);
  req.idle_timeout = kWatchQuiet;
  asio::io_context context;
  http::HttpClient client(context, client_);
  Result<KubeReply> out = KubeReply{200, {}};
  http::ClientStream* open = nullptr;  // the stream, while it is read
  bool finished = false;
  asio::co_spawn(
      context,
      [&]() -> asio::awaitable<void> {
        auto opened = co_await client.stream(std::move(req));
        if (!opened) {
          out = fail(down(opened.error().message));
          finished = true;
          co_return;
        }
        std::unique_ptr<http::ClientStream> stream = std::move(*opened);
        open = stream.get();
        if (stream->status() != 200) {
          std::string text;
          while (text.size() < kMaxRefusal) {
            auto piece = co_await stream->next();
            if (!piece || !*piece) break;
            text += **piece;
          }
          out = KubeReply{stream->status(), std::move(text)};
        } else {
          // Each line is an event. The stream ends when the server ends it, cuts it, keeps quiet
          // too long or `stop` is set; its caller resumes it from the version it has.
          std::string data;
          bool more = true;
          while (more) {
            auto piece = co_await stream->next();
            if (!piece || !*piece) break;
            data += **piece;
            size_t nl;
            while (more && (nl = data.find('\n')) != std::string::npos) {
              const std::string line = data.substr(0, nl);
              data.erase(0, nl + 1);
              if (!line.empty()) more = on_line(line);
            }
            if (data.size() > kMaxWatchEvent) {
              out = fail(down("a watch event past 16 MiB"));
              break;
            }
          }
        }
        open = nullptr;
        finished = true;
      },
      asio::detached);
  // `stop` is looked at every second; a stream being read is cancelled then (one being opened
  // ends within the timeout).
  bool cancelled = false;
  while (!finished) {
    context.run_for(std::chrono::seconds(1));
    if (!finished && stop && !cancelled && open != nullptr) {
      open->cancel();
      cancelled = true;
    }
  }
  return out;
}

}  // namespace purser::exec
