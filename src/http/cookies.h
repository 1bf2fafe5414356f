// Cookies (RFC 6265): reading one from a request's Cookie header, and writing Set-Cookie.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "http/message.h"

namespace purser::http {

// The value of the cookie `name` in the request's Cookie header(s); nullopt when absent. The
// first of several with that name wins (the most specific path, as browsers send them).
std::optional<std::string> cookie(const Request& req, std::string_view name);

struct CookieOptions {
  std::string path = "/";
  // Max-Age in seconds; nullopt: a cookie for the browser's session; 0: delete it.
  std::optional<int64_t> max_age;
  bool http_only = true;
  bool secure = false;
  std::string same_site = "Lax";  // Strict, Lax or None
};

// A Set-Cookie header's value. `value` must be cookie-octets (no spaces, quotes, commas,
// semicolons or backslashes); callers pass base64url tokens.
std::string setCookie(std::string_view name, std::string_view value, const CookieOptions& options);

}  // namespace purser::http
