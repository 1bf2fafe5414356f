#include "identity/id_token.h"

#include <utility>

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "common/base64.h"
#include "common/crypto.h"
#include "common/json.h"

namespace purser::identity {

namespace {

using nlohmann::json;

Error refused(std::string why) {
  return Error(ErrorCode::kUnauthenticated, "the ID token is refused: " + std::move(why));
}

std::string stringOf(const json& object, const char* name) {
  auto it = object.find(name);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// A NumericDate claim (seconds since the epoch; JSON numbers, fractions allowed).
std::optional<int64_t> dateOf(const json& claims, const char* name) {
  auto it = claims.find(name);
  if (it == claims.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  if (!(v > 0 && v < 1e11)) return std::nullopt;  // NaN, negative, or past year 5000
  return static_cast<int64_t>(v);
}

std::optional<std::string> decodePart(std::string_view part) { return base64UrlDecode(part); }

}  // namespace

Result<std::vector<Jwk>> parseJwks(std::string_view document) {
  auto parsed = parseJson(document, 8);
  if (!parsed || !parsed->is_object() || !parsed->contains("keys") ||
      !(*parsed)["keys"].is_array()) {
    return fail(invalidArgument("the provider's JWK set is not a JSON object with \"keys\""));
  }
  std::vector<Jwk> out;
  for (const json& k : (*parsed)["keys"]) {
    if (out.size() >= kMaxJwks) break;
    if (!k.is_object()) continue;
    const std::string use = stringOf(k, "use");
    if (!use.empty() && use != "sig") continue;
    const std::string kty = stringOf(k, "kty");
    const auto bytes = [&](const char* name) { return base64UrlDecode(stringOf(k, name)); };
    Result<crypto::PublicKey> key = fail(invalidArgument("unsupported"));
    if (kty == "RSA") {
      auto n = bytes("n");
      auto e = bytes("e");
      if (!n || !e) continue;
      key = crypto::PublicKey::rsa(*n, *e);
    } else if (kty == "EC") {
      auto x = bytes("x");
      auto y = bytes("y");
      if (!x || !y) continue;
      key = crypto::PublicKey::ec(stringOf(k, "crv"), *x, *y);
    }
    if (!key) continue;
    out.push_back({stringOf(k, "kid"), stringOf(k, "alg"), std::move(*key)});
  }
  if (out.empty()) {
    return fail(invalidArgument(
        "the provider's JWK set holds no signing key Purser can use (RSA of 2048 bits or more, "
        "EC on P-256 or P-384)"));
  }
  return out;
}

Result<IdToken> verifyIdToken(std::string_view token, const std::vector<Jwk>& keys,
                              const IdTokenExpectations& expect) {
  if (token.size() > kMaxTokenBytes) {
    return fail(refused(fmt::format("it is larger than {} bytes", kMaxTokenBytes)));
  }
  const size_t first = token.find('.');
  const size_t second = first == std::string_view::npos ? first : token.find('.', first + 1);
  if (second == std::string_view::npos || token.find('.', second + 1) != std::string_view::npos) {
    return fail(refused("it is not a signed JWT (three dot-separated parts)"));
  }
  const auto header_text = decodePart(token.substr(0, first));
  const auto payload_text = decodePart(token.substr(first + 1, second - first - 1));
  const auto signature = decodePart(token.substr(second + 1));
  if (!header_text || !payload_text || !signature) {
    return fail(refused("a part is not base64url"));
  }
  auto header = parseJson(*header_text, 4);
  auto payload = parseJson(*payload_text, 16);
  if (!header || !header->is_object() || !payload || !payload->is_object()) {
    return fail(refused("its header or claims are not a JSON object"));
  }
  IdToken out;
  out.alg = stringOf(*header, "alg");
  out.kid = stringOf(*header, "kid");
  if (!crypto::jwsAlgorithmSupported(out.alg)) {
    return fail(refused(fmt::format(
        "its algorithm \"{}\" is not accepted (RS256, RS384, PS256, PS384, ES256, ES384 are)",
        toValidUtf8(out.alg.substr(0, 32)))));
  }
  if (header->contains("crit")) return fail(refused("it has critical header extensions"));
  // The key: by kid; without a kid, any key of the set that fits the algorithm.
  const std::string_view signed_part = token.substr(0, second);
  bool known = false, verified = false;
  for (const Jwk& k : keys) {
    if (!out.kid.empty() && k.kid != out.kid) continue;
    if (!k.alg.empty() && k.alg != out.alg) continue;
    known = true;
    if (k.key.verify(out.alg, signed_part, *signature)) {
      verified = true;
      break;
    }
  }
  if (!known) {
    return fail(Error(ErrorCode::kNotFound,
                      fmt::format("no key of the provider's JWK set has the ID token's key id "
                                  "\"{}\" and algorithm {}",
                                  toValidUtf8(out.kid.substr(0, 64)), out.alg)));
  }
  if (!verified) return fail(refused("its signature does not verify"));

  const json& c = *payload;
  if (stringOf(c, "iss") != expect.issuer) {
    return fail(
        refused(fmt::format("it was issued by \"{}\", not \"{}\"",
                            toValidUtf8(stringOf(c, "iss").substr(0, 256)), expect.issuer)));
  }
  bool audience = false;
  size_t audiences = 0;
  if (auto aud = c.find("aud"); aud != c.end()) {
    if (aud->is_string()) {
      audiences = 1;
      audience = aud->get<std::string>() == expect.client_id;
    } else if (aud->is_array()) {
      for (const auto& a : *aud) {
        ++audiences;
        audience = audience || (a.is_string() && a.get<std::string>() == expect.client_id);
      }
    }
  }
  if (!audience) return fail(refused("it is not meant for this client (aud)"));
  const std::string azp = stringOf(c, "azp");
  if ((audiences > 1 || c.contains("azp")) && azp != expect.client_id) {
    return fail(refused("its authorized party (azp) is another client"));
  }
  const int64_t now =
      std::chrono::duration_cast<std::chrono::seconds>(expect.now.time_since_epoch()).count();
  const int64_t leeway = expect.leeway.count();
  const auto exp = dateOf(c, "exp");
  const auto iat = dateOf(c, "iat");
  if (!exp || !iat) return fail(refused("it has no expiry (exp) or issue time (iat)"));
  if (now >= *exp + leeway) return fail(refused("it has expired"));
  if (*iat > now + leeway) return fail(refused("it was issued in the future (iat)"));
  if (*iat < now - expect.max_age.count()) return fail(refused("it was issued too long ago"));
  if (auto nbf = dateOf(c, "nbf"); nbf && *nbf > now + leeway) {
    return fail(refused("it is not valid yet (nbf)"));
  }
  if (expect.without_nonce) {
    if (c.contains("nonce")) return fail(refused("it carries a nonce this sign-in never sent"));
  } else if (expect.nonce.empty() ||
             !crypto::constantTimeEquals(stringOf(c, "nonce"), expect.nonce)) {
    return fail(refused("its nonce is not the one this sign-in sent"));
  }
  out.subject = stringOf(c, "sub");
  if (out.subject.empty() || out.subject.size() > 255) {
    return fail(refused("it has no subject (sub) of 1 to 255 characters"));
  }
  out.claims = std::move(*payload);
  return out;
}

std::vector<std::string> claimStrings(const nlohmann::json& claims, const std::string& name) {
  std::vector<std::string> out;
  auto it = claims.find(name);
  if (it == claims.end()) return out;
  const auto take = [&](const json& v) {
    if (v.is_string() && out.size() < 1000) {
      std::string s = v.get<std::string>();
      if (!s.empty() && s.size() <= 256 && isValidUtf8(s)) out.push_back(std::move(s));
    }
  };
  if (it->is_array()) {
    for (const auto& v : *it) take(v);
  } else {
    take(*it);
  }
  return out;
}

std::string pkceChallenge(std::string_view verifier) {
  return base64UrlEncode(crypto::sha256(verifier));
}

std::string randomToken() {
  std::string bytes(32, '\0');
  crypto::randomBytes(std::span<uint8_t>(reinterpret_cast<uint8_t*>(bytes.data()), bytes.size()));
  return base64UrlEncode(bytes);
}

}  // namespace purser::identity
