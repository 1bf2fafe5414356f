#include "sso/sign_in.h"

#include <fmt/format.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/base64.h"
#include "common/crypto.h"
#include "common/json.h"

namespace purser::sso {

namespace {

using nlohmann::json;

Error refused(std::string why) {
  return Error(ErrorCode::kUnauthenticated, "the sign-in " + std::move(why) + "; start again");
}

std::string text(const json& j, const char* name) {
  auto it = j.find(name);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

std::string sealPending(const PendingSignIn& p, std::string_view key) {
  const json j = {
      {"s", p.state},
      {"n", p.nonce},
      {"v", p.verifier},
      {"r", p.return_to},
      {"u", p.redirect_uri},
      {"e",
       std::chrono::duration_cast<std::chrono::seconds>(p.expires_at.time_since_epoch()).count()}};
  const std::string payload = base64UrlEncode(writeJson(j));
  return payload + "." + base64UrlEncode(crypto::hmacSha256(key, payload));
}

Result<PendingSignIn> openPending(std::string_view cookie, std::string_view key, SystemTime now) {
  if (cookie.size() > 4096) return fail(refused("cookie is too long"));
  const size_t dot = cookie.find('.');
  if (dot == std::string_view::npos) return fail(refused("cookie is not one of Purser's"));
  const std::string_view payload = cookie.substr(0, dot);
  const auto mac = base64UrlDecode(cookie.substr(dot + 1));
  if (!mac || !crypto::constantTimeEquals(*mac, crypto::hmacSha256(key, payload))) {
    return fail(refused("cookie was altered, or made with another master key"));
  }
  const auto decoded = base64UrlDecode(payload);
  auto j = decoded ? parseJson(*decoded, 4) : Result<json>(fail(invalidArgument("")));
  if (!j || !j->is_object() || !j->contains("e") || !(*j)["e"].is_number_integer()) {
    return fail(refused("cookie is not one of Purser's"));
  }
  PendingSignIn p;
  p.state = text(*j, "s");
  p.nonce = text(*j, "n");
  p.verifier = text(*j, "v");
  p.return_to = safeReturnPath(text(*j, "r"));
  p.redirect_uri = text(*j, "u");
  p.expires_at = SystemTime(std::chrono::seconds((*j)["e"].get<int64_t>()));
  if (now >= p.expires_at) return fail(refused("took too long (more than 10 minutes)"));
  if (p.state.empty() || p.nonce.empty() || p.verifier.empty()) {
    return fail(refused("cookie is not one of Purser's"));
  }
  return p;
}

std::string safeReturnPath(std::string_view wanted) {
  if (wanted.empty() || wanted.size() > 512 || wanted.front() != '/' || wanted.starts_with("//") ||
      wanted.starts_with("/\\")) {
    return "/";
  }
  for (const unsigned char c : wanted) {
    if (c < 0x21 || c >= 0x7f || c == '\\') return "/";
  }
  return std::string(wanted);
}

std::optional<size_t> firstMatchingRule(const std::vector<std::string>& groups,
                                        const std::vector<RoleRule>& rules) {
  for (size_t i = 0; i < rules.size(); ++i) {
    if (std::find(groups.begin(), groups.end(), rules[i].group) != groups.end()) return i;
  }
  return std::nullopt;
}

std::string userNameFrom(std::string_view wanted) {
  const std::string valid = toValidUtf8(wanted);
  std::string out;
  for (size_t i = 0; i < valid.size();) {
    const auto c = static_cast<unsigned char>(valid[i]);
    const size_t len = c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
    if (out.size() + len > 64) break;
    if (c >= 0x20 && c != 0x7f) out.append(valid, i, len);
    i += len;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  while (!out.empty() && out.front() == ' ') out.erase(out.begin());
  return out.empty() ? "user" : out;
}

}  // namespace purser::sso
