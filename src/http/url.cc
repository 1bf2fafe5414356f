#include "http/url.h"

#include <fmt/format.h>

#include <charconv>

namespace purser::http {

std::string Url::authority() const {
  const bool v6 = host.find(':') != std::string::npos;
  const std::string h = v6 ? "[" + host + "]" : host;
  if ((tls && port == 443) || (!tls && port == 80)) return h;
  return fmt::format("{}:{}", h, port);
}

Result<Url> parseUrl(std::string_view text) {
  const auto bad = [&](std::string_view why) {
    return fail(invalidArgument(fmt::format("invalid URL \"{}\": {}", text, why)));
  };
  Url url;
  std::string_view rest;
  if (text.starts_with("http://")) {
    rest = text.substr(7);
  } else if (text.starts_with("https://")) {
    url.tls = true;
    rest = text.substr(8);
  } else {
    return bad("expected it to start with http:// or https://");
  }
  const size_t slash = rest.find_first_of("/?");
  std::string_view authority = rest.substr(0, slash);
  url.target = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
  if (url.target[0] == '?') url.target = "/" + url.target;  // "http://h?q" means "/?q"
  if (authority.find('@') != std::string_view::npos) {
    return bad("credentials in URLs are not supported; use a provider key instead");
  }
  std::string_view port_text;
  if (!authority.empty() && authority[0] == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return bad("unterminated IPv6 address");
    url.host = std::string(authority.substr(1, close - 1));
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return bad("unexpected text after the IPv6 address");
      port_text = after.substr(1);
    }
  } else {
    const size_t colon = authority.rfind(':');
    url.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port_text = authority.substr(colon + 1);
  }
  if (url.host.empty()) return bad("the host is missing");
  if (!port_text.empty()) {
    unsigned port = 0;
    const auto [ptr, ec] =
        std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || ptr != port_text.data() + port_text.size() || port == 0 ||
        port > 65535) {
      return bad("the port must be a number from 1 to 65535");
    }
    url.port = static_cast<uint16_t>(port);
  } else {
    url.port = url.tls ? 443 : 80;
  }
  return url;
}

}  // namespace purser::http
