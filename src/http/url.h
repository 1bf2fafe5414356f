// Absolute http(s) URLs for upstream calls: "https://api.example.com:8443/v1/chat/completions".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace purser::http {

struct Url {
  bool tls = false;    // https
  std::string host;    // without brackets for IPv6 literals
  uint16_t port = 0;   // explicit or the scheme's default
  std::string target;  // path and query, "/" when empty

  // "host:port" as a pool key and for the Host header (brackets for IPv6, default ports omitted).
  std::string authority() const;
};

Result<Url> parseUrl(std::string_view text);

}  // namespace purser::http
