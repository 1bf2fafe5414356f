#include "server/console.h"

#include <fmt/format.h>

#include "common/hash.h"

namespace purser::server {

std::string_view contentTypeFor(std::string_view path) {
  static constexpr std::pair<std::string_view, std::string_view> kTypes[] = {
      {".html", "text/html; charset=utf-8"},
      {".js", "text/javascript; charset=utf-8"},
      {".mjs", "text/javascript; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},
      {".json", "application/json"},
      {".svg", "image/svg+xml"},
      {".png", "image/png"},
      {".ico", "image/x-icon"},
      {".woff2", "font/woff2"},
  };
  for (const auto& [ext, type] : kTypes) {
    if (path.ends_with(ext)) return type;
  }
  return "application/octet-stream";
}

namespace {

std::string etagOf(std::string_view data) { return fmt::format("\"{}\"", fnv1a64Hex(data)); }

}  // namespace

Result<void> addConsoleRoutes(http::Router& router) {
  for (const EmbeddedFile& file : embeddedConsoleFiles()) {
    const std::string_view data(file.data, file.size);
    const std::string etag = etagOf(data);
    const std::string type(contentTypeFor(file.path));
    auto handler = [data, etag, type](http::Request& req) {
      if (req.headers.get("if-none-match") == etag) {
        http::Response r;
        r.status = 304;
        r.headers.add("ETag", etag);
        return r;
      }
      http::Response r = http::Response::text(200, std::string(data), type);
      r.headers.add("ETag", etag);
      r.headers.add("Cache-Control", "no-cache");
      r.headers.add("X-Content-Type-Options", "nosniff");
      return r;
    };
    PURSER_TRY(router.add(http::Method::kGet, file.path, handler));
    if (std::string_view(file.path) == "/index.html") {
      PURSER_TRY(router.add(http::Method::kGet, "/", handler));
    }
  }
  return {};
}

}  // namespace purser::server
