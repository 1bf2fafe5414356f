#include "http/message.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/json.h"

namespace purser::http {

std::string_view methodName(Method m) {
  switch (m) {
    case Method::kGet:
      return "GET";
    case Method::kHead:
      return "HEAD";
    case Method::kPost:
      return "POST";
    case Method::kPut:
      return "PUT";
    case Method::kPatch:
      return "PATCH";
    case Method::kDelete:
      return "DELETE";
    case Method::kOptions:
      return "OPTIONS";
    case Method::kOther:
      return "OTHER";
  }
  return "OTHER";
}

Method parseMethod(std::string_view name) {
  static constexpr std::pair<std::string_view, Method> kMethods[] = {
      {"GET", Method::kGet},        {"HEAD", Method::kHead},   {"POST", Method::kPost},
      {"PUT", Method::kPut},        {"PATCH", Method::kPatch}, {"DELETE", Method::kDelete},
      {"OPTIONS", Method::kOptions}};
  for (const auto& [n, m] : kMethods) {
    if (n == name) return m;
  }
  return Method::kOther;
}

bool equalsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           const auto lx = (x >= 'A' && x <= 'Z') ? static_cast<char>(x + 32) : x;
           const auto ly = (y >= 'A' && y <= 'Z') ? static_cast<char>(y + 32) : y;
           return lx == ly;
         });
}

void Headers::add(std::string name, std::string value) {
  fields_.emplace_back(std::move(name), std::move(value));
}

void Headers::set(std::string_view name, std::string value) {
  remove(name);
  fields_.emplace_back(std::string(name), std::move(value));
}

void Headers::remove(std::string_view name) {
  std::erase_if(fields_, [&](const Field& f) { return equalsIgnoreCase(f.first, name); });
}

std::optional<std::string_view> Headers::get(std::string_view name) const {
  for (const auto& [n, v] : fields_) {
    if (equalsIgnoreCase(n, name)) return std::string_view(v);
  }
  return std::nullopt;
}

std::string_view Request::path() const {
  const std::string_view t(target);
  return t.substr(0, t.find('?'));
}

std::string_view Request::query() const {
  const std::string_view t(target);
  const size_t q = t.find('?');
  return q == std::string_view::npos ? std::string_view() : t.substr(q + 1);
}

std::optional<std::string_view> Request::param(std::string_view name) const {
  for (const auto& [n, v] : params) {
    if (n == name) return std::string_view(v);
  }
  return std::nullopt;
}

std::optional<std::string> Request::queryParam(std::string_view name) const {
  std::string_view q = query();
  while (!q.empty()) {
    const size_t amp = q.find('&');
    const std::string_view pair = q.substr(0, amp);
    q = amp == std::string_view::npos ? std::string_view() : q.substr(amp + 1);
    const size_t eq = pair.find('=');
    auto key = percentDecode(pair.substr(0, eq), true);
    if (key && *key == name) {
      if (eq == std::string_view::npos) return std::string();
      return percentDecode(pair.substr(eq + 1), true);
    }
  }
  return std::nullopt;
}

std::optional<std::string> Request::targetProblem() const {
  const auto check = [](std::string_view raw, bool plus_as_space,
                        std::string_view what) -> std::optional<std::string> {
    auto decoded = percentDecode(raw, plus_as_space);
    if (!decoded) return fmt::format("the {} has a malformed percent-escape", what);
    if (!isValidUtf8(*decoded)) return fmt::format("the {} is not valid UTF-8", what);
    if (decoded->find('\0') != std::string::npos) {
      return fmt::format("the {} contains a NUL character", what);
    }
    return std::nullopt;
  };
  if (auto bad = check(path(), false, "request path")) return bad;
  std::string_view q = query();
  while (!q.empty()) {
    const size_t amp = q.find('&');
    const std::string_view pair = q.substr(0, amp);
    q = amp == std::string_view::npos ? std::string_view() : q.substr(amp + 1);
    if (auto bad = check(pair, true, "query string")) return bad;
  }
  return std::nullopt;
}

Response Response::text(int status, std::string body, std::string content_type) {
  Response r;
  r.status = status;
  r.headers.add("Content-Type", std::move(content_type));
  r.body = std::move(body);
  return r;
}

Response Response::json(int status, std::string body) {
  return text(status, std::move(body), "application/json");
}

std::string_view statusReason(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 202:
      return "Accepted";
    case 204:
      return "No Content";
    case 301:
      return "Moved Permanently";
    case 302:
      return "Found";
    case 304:
      return "Not Modified";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 411:
      return "Length Required";
    case 413:
      return "Payload Too Large";
    case 414:
      return "URI Too Long";
    case 415:
      return "Unsupported Media Type";
    case 417:
      return "Expectation Failed";
    case 422:
      return "Unprocessable Entity";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 499:
      return "Client Closed Request";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

std::optional<std::string> percentDecode(std::string_view s, bool plus_as_space) {
  const auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%') {
      if (i + 2 >= s.size()) return std::nullopt;
      const int hi = hex(s[i + 1]);
      const int lo = hex(s[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (s[i] == '+' && plus_as_space) {
      out.push_back(' ');
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

}  // namespace purser::http
