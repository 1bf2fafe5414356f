#include "http/cookies.h"

#include <fmt/format.h>

namespace purser::http {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

std::optional<std::string> cookie(const Request& req, std::string_view name) {
  for (const auto& [key, value] : req.headers) {
    if (!equalsIgnoreCase(key, "cookie")) continue;
    std::string_view rest = value;
    while (!rest.empty()) {
      const size_t semi = rest.find(';');
      const std::string_view pair = trim(rest.substr(0, semi));
      rest = semi == std::string_view::npos ? std::string_view() : rest.substr(semi + 1);
      const size_t eq = pair.find('=');
      if (eq == std::string_view::npos || trim(pair.substr(0, eq)) != name) continue;
      std::string_view v = trim(pair.substr(eq + 1));
      if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
      return std::string(v);
    }
  }
  return std::nullopt;
}

std::string setCookie(std::string_view name, std::string_view value, const CookieOptions& options) {
  std::string out = fmt::format("{}={}; Path={}", name, value, options.path);
  if (options.max_age) out += fmt::format("; Max-Age={}", *options.max_age);
  if (options.http_only) out += "; HttpOnly";
  if (options.secure) out += "; Secure";
  if (!options.same_site.empty()) out += "; SameSite=" + options.same_site;
  return out;
}

}  // namespace purser::http
