#include "sso/oidc_client.h"

#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>

#include "common/base64.h"
#include "common/json.h"
#include "http/url.h"

namespace purser::sso {

namespace {

using nlohmann::json;

// application/x-www-form-urlencoded and query values: everything but the unreserved characters
// percent-encoded.
std::string formEncode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    const auto b = static_cast<unsigned char>(c);
    if (std::isalnum(b) != 0 || c == '-' || c == '.' || c == '_' || c == '~') {
      out += c;
    } else {
      out += fmt::format("%{:02X}", b);
    }
  }
  return out;
}

std::string form(const std::vector<std::pair<std::string, std::string>>& fields) {
  std::string out;
  for (const auto& [k, v] : fields) {
    if (!out.empty()) out += '&';
    out += formEncode(k) + "=" + formEncode(v);
  }
  return out;
}

std::string stringOf(const json& object, const char* name) {
  auto it = object.find(name);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

Error unavailableProvider(std::string why) {
  return Error(ErrorCode::kUnavailable, "the identity provider " + std::move(why));
}

}  // namespace

Result<void> checkIssuer(std::string_view issuer) {
  auto url = http::parseUrl(issuer);
  if (!url) {
    return fail(invalidArgument(fmt::format("the issuer \"{}\" is not an http(s) URL", issuer)));
  }
  if (issuer.find('?') != std::string_view::npos || issuer.find('#') != std::string_view::npos) {
    return fail(invalidArgument("the issuer has no query or fragment (OpenID Connect Discovery)"));
  }
  if (!url->tls && url->host != "127.0.0.1") {
    return fail(invalidArgument(fmt::format(
        "the issuer \"{}\" is plain http://: only https:// is accepted (http://127.0.0.1 for a "
        "provider on this machine, as tests run one)",
        issuer)));
  }
  return {};
}

Result<ProviderMetadata> parseDiscovery(std::string_view document,
                                        std::string_view expected_issuer) {
  auto parsed = parseJson(document, 8);
  if (!parsed || !parsed->is_object()) {
    return fail(unavailableProvider("answered discovery with what is not a JSON object"));
  }
  const json& d = *parsed;
  ProviderMetadata m;
  m.issuer = stringOf(d, "issuer");
  if (m.issuer != expected_issuer) {
    return fail(unavailableProvider(
        fmt::format("names itself \"{}\" in its discovery document, not \"{}\" as configured",
                    toValidUtf8(m.issuer.substr(0, 256)), expected_issuer)));
  }
  m.authorization_endpoint = stringOf(d, "authorization_endpoint");
  m.token_endpoint = stringOf(d, "token_endpoint");
  m.jwks_uri = stringOf(d, "jwks_uri");
  m.userinfo_endpoint = stringOf(d, "userinfo_endpoint");
  m.end_session_endpoint = stringOf(d, "end_session_endpoint");
  m.device_authorization_endpoint = stringOf(d, "device_authorization_endpoint");
  for (const auto& [name, value] :
       {std::pair{"authorization_endpoint", &m.authorization_endpoint},
        {"token_endpoint", &m.token_endpoint},
        {"jwks_uri", &m.jwks_uri},
        {"userinfo_endpoint", &m.userinfo_endpoint},
        {"end_session_endpoint", &m.end_session_endpoint},
        {"device_authorization_endpoint", &m.device_authorization_endpoint}}) {
    const bool required = std::string_view(name) == "authorization_endpoint" ||
                          std::string_view(name) == "token_endpoint" ||
                          std::string_view(name) == "jwks_uri";
    if (value->empty()) {
      if (required) {
        return fail(unavailableProvider(fmt::format("has no {} in its discovery document", name)));
      }
      continue;
    }
    if (!checkIssuer(*value)) {
      return fail(unavailableProvider(
          fmt::format("gives a {} that is neither https:// nor http://127.0.0.1: {}", name,
                      toValidUtf8(value->substr(0, 256)))));
    }
  }
  if (auto it = d.find("token_endpoint_auth_methods_supported"); it != d.end() && it->is_array()) {
    for (const auto& v : *it) {
      if (v.is_string() && m.token_auth_methods.size() < 16) {
        m.token_auth_methods.push_back(v.get<std::string>());
      }
    }
  }
  if (auto it = d.find("code_challenge_methods_supported"); it != d.end() && it->is_array()) {
    m.s256 = std::any_of(it->begin(), it->end(), [](const json& v) {
      return v.is_string() && v.get<std::string>() == "S256";
    });
  }
  return m;
}

OidcClient::OidcClient(OidcOptions options, http::WorkerLocal<http::HttpClient>& clients,
                       const Clock& clock)
    : options_(std::move(options)), clients_(clients), clock_(clock) {}

std::string OidcClient::displayName() const {
  auto url = http::parseUrl(options_.issuer);
  return url ? url->host : options_.issuer;
}

boost::asio::awaitable<Result<std::string>> OidcClient::get(std::string url, std::string bearer) {
  http::ClientRequest req;
  req.url = std::move(url);
  req.headers.add("Accept", "application/json");
  if (!bearer.empty()) req.headers.add("Authorization", "Bearer " + bearer);
  req.max_response_bytes = options_.max_response_bytes;
  req.timeout = std::chrono::seconds(10);
  const std::string where = req.url;
  auto r = co_await clients_.current().request(std::move(req));
  if (!r) co_return fail(unavailableProvider("cannot be reached: " + r.error().message));
  if (r->status != 200) {
    co_return fail(unavailableProvider(fmt::format("answered {} at {}", r->status, where)));
  }
  co_return std::move(r->body);
}

boost::asio::awaitable<Result<ProviderMetadata>> OidcClient::metadata() {
  {
    std::lock_guard lock(mu_);
    if (metadata_) co_return *metadata_;
  }
  std::string issuer = options_.issuer;
  while (issuer.ends_with('/')) issuer.pop_back();
  auto text = co_await get(issuer + "/.well-known/openid-configuration", "");
  if (!text) co_return fail(text.error());
  auto m = parseDiscovery(*text, options_.issuer);
  if (!m) co_return fail(m.error());
  std::lock_guard lock(mu_);
  metadata_ = *m;
  co_return *m;
}

boost::asio::awaitable<Result<std::vector<identity::Jwk>>> OidcClient::keys(bool refresh) {
  {
    std::lock_guard lock(mu_);
    // A JWK set is never empty once fetched (parseJwks refuses one without a usable key).
    const bool fetched = !keys_.empty();
    const bool recent = fetched && clock_.monotonic() - keys_fetched_ < options_.jwks_min_refresh;
    if (fetched && (!refresh || recent)) co_return keys_;
  }
  auto m = co_await metadata();
  if (!m) co_return fail(m.error());
  auto text = co_await get(m->jwks_uri, "");
  if (!text) co_return fail(text.error());
  auto parsed = identity::parseJwks(*text);
  if (!parsed) co_return fail(unavailableProvider(parsed.error().message));
  std::lock_guard lock(mu_);
  keys_ = *parsed;
  keys_fetched_ = clock_.monotonic();
  co_return keys_;
}

boost::asio::awaitable<Result<SignInStart>> OidcClient::start(std::string redirect_url) {
  if (redirect_url.empty()) redirect_url = options_.redirect_url;
  auto m = co_await metadata();
  if (!m) co_return fail(m.error());
  SignInStart s;
  s.state = identity::randomToken();
  s.nonce = identity::randomToken();
  s.verifier = identity::randomToken();
  std::string scopes;
  for (const auto& scope : options_.scopes) scopes += (scopes.empty() ? "" : " ") + scope;
  s.url = m->authorization_endpoint +
          (m->authorization_endpoint.find('?') == std::string::npos ? "?" : "&") +
          form({{"response_type", "code"},
                {"client_id", options_.client_id},
                {"redirect_uri", redirect_url},
                {"scope", scopes},
                {"state", s.state},
                {"nonce", s.nonce},
                {"code_challenge", identity::pkceChallenge(s.verifier)},
                {"code_challenge_method", "S256"}});
  co_return s;
}

boost::asio::awaitable<Result<OidcClient::TokenAnswer>> OidcClient::postAsClient(
    const ProviderMetadata& m, std::string url,
    std::vector<std::pair<std::string, std::string>> fields) {
  // The client authenticates as the provider prefers: HTTP Basic (the default of OpenID Connect)
  // unless it lists only client_secret_post.
  const auto& methods = m.token_auth_methods;
  const bool post =
      !methods.empty() &&
      std::find(methods.begin(), methods.end(), "client_secret_basic") == methods.end() &&
      std::find(methods.begin(), methods.end(), "client_secret_post") != methods.end();
  http::ClientRequest req;
  req.method = http::Method::kPost;
  req.url = std::move(url);
  req.headers.add("Content-Type", "application/x-www-form-urlencoded");
  req.headers.add("Accept", "application/json");
  if (post) {
    fields.emplace_back("client_id", options_.client_id);
    fields.emplace_back("client_secret", options_.client_secret);
  } else {
    req.headers.add("Authorization", "Basic " + base64Encode(formEncode(options_.client_id) + ":" +
                                                             formEncode(options_.client_secret)));
  }
  req.body = form(fields);
  req.max_response_bytes = options_.max_response_bytes;
  req.timeout = std::chrono::seconds(10);
  auto r = co_await clients_.current().request(std::move(req));
  if (!r) co_return fail(unavailableProvider("cannot be reached: " + r.error().message));
  auto answer = parseJson(r->body, 16);
  if (!answer || !answer->is_object()) {
    if (r->status != 200) {
      co_return fail(
          unavailableProvider(fmt::format("answered {} without a JSON error", r->status)));
    }
    co_return fail(unavailableProvider("answered with what is not a JSON object"));
  }
  co_return TokenAnswer{r->status, std::move(*answer)};
}

boost::asio::awaitable<Result<SignedIn>> OidcClient::finish(std::string code, std::string verifier,
                                                            std::string nonce,
                                                            std::string redirect_url) {
  if (redirect_url.empty()) redirect_url = options_.redirect_url;
  auto m = co_await metadata();
  if (!m) co_return fail(m.error());
  // Named, not a braced temporary: GCC 12 mishandles string literals in those across co_await.
  std::vector<std::pair<std::string, std::string>> fields;
  fields.emplace_back("grant_type", "authorization_code");
  fields.emplace_back("code", code);
  fields.emplace_back("redirect_uri", redirect_url);
  fields.emplace_back("code_verifier", verifier);
  auto answer = co_await postAsClient(*m, m->token_endpoint, std::move(fields));
  if (!answer) co_return fail(answer.error());
  if (answer->status != 200) {
    const std::string error = stringOf(answer->body, "error");
    const std::string description = stringOf(answer->body, "error_description");
    co_return fail(
        Error(answer->status == 400 || answer->status == 401 ? ErrorCode::kUnauthenticated
                                                             : ErrorCode::kUnavailable,
              fmt::format(
                  "the identity provider refused the sign-in's code ({}{}{})",
                  error.empty() ? std::to_string(answer->status) : toValidUtf8(error.substr(0, 64)),
                  description.empty() ? "" : ": ", toValidUtf8(description.substr(0, 256)))));
  }
  if (nonce.empty()) co_return fail(Error(ErrorCode::kUnauthenticated, "the sign-in has no nonce"));
  co_return co_await vouched(*m, answer->body, std::move(nonce));
}

boost::asio::awaitable<Result<DeviceStart>> OidcClient::startDevice() {
  auto m = co_await metadata();
  if (!m) co_return fail(m.error());
  if (m->device_authorization_endpoint.empty()) {
    co_return fail(Error(ErrorCode::kFailedPrecondition,
                         "the identity provider offers no device authorization (its discovery "
                         "document has no device_authorization_endpoint); sign in with the "
                         "console, or use an API key"));
  }
  std::string scopes;
  for (const auto& scope : options_.scopes) scopes += (scopes.empty() ? "" : " ") + scope;
  std::vector<std::pair<std::string, std::string>> fields;
  fields.emplace_back("client_id", options_.client_id);
  fields.emplace_back("scope", scopes);
  auto answer = co_await postAsClient(*m, m->device_authorization_endpoint, std::move(fields));
  if (!answer) co_return fail(answer.error());
  if (answer->status != 200) {
    co_return fail(unavailableProvider(
        fmt::format("refused a device authorization ({})",
                    toValidUtf8(stringOf(answer->body, "error").substr(0, 64)))));
  }
  DeviceStart d;
  d.device_code = stringOf(answer->body, "device_code");
  d.user_code = stringOf(answer->body, "user_code");
  d.verification_uri = stringOf(answer->body, "verification_uri");
  d.verification_uri_complete = stringOf(answer->body, "verification_uri_complete");
  const auto number = [&](const char* name, int64_t fallback, int64_t max) {
    auto it = answer->body.find(name);
    if (it == answer->body.end() || !it->is_number_integer()) return fallback;
    return std::clamp<int64_t>(it->get<int64_t>(), 1, max);
  };
  d.interval = number("interval", 5, 60);
  d.expires_in = number("expires_in", 600, 3600);
  if (d.device_code.empty() || d.user_code.empty() || !checkIssuer(d.verification_uri)) {
    co_return fail(
        unavailableProvider("answered a device authorization without a device code, "
                            "user code or http(s) verification URI"));
  }
  co_return d;
}

boost::asio::awaitable<Result<std::optional<SignedIn>>> OidcClient::pollDevice(
    std::string device_code) {
  auto m = co_await metadata();
  if (!m) co_return fail(m.error());
  std::vector<std::pair<std::string, std::string>> fields;
  fields.emplace_back("grant_type", "urn:ietf:params:oauth:grant-type:device_code");
  fields.emplace_back("device_code", device_code);
  fields.emplace_back("client_id", options_.client_id);
  auto answer = co_await postAsClient(*m, m->token_endpoint, std::move(fields));
  if (!answer) co_return fail(answer.error());
  if (answer->status != 200) {
    const std::string error = stringOf(answer->body, "error");
    if (error == "authorization_pending" || error == "slow_down") co_return std::nullopt;
    co_return fail(Error(ErrorCode::kUnauthenticated,
                         fmt::format("the identity provider ended the device sign-in ({})",
                                     error.empty() ? std::to_string(answer->status)
                                                   : toValidUtf8(error.substr(0, 64)))));
  }
  auto who = co_await vouched(*m, answer->body, "");
  if (!who) co_return fail(who.error());
  co_return std::optional<SignedIn>(std::move(*who));
}

boost::asio::awaitable<Result<SignedIn>> OidcClient::vouched(const ProviderMetadata& m,
                                                             const json& answer,
                                                             std::string nonce) {
  const std::string id_token = stringOf(answer, "id_token");
  const std::string access_token = stringOf(answer, "access_token");
  if (id_token.empty()) {
    co_return fail(unavailableProvider("answered the token request without an ID token"));
  }
  identity::IdTokenExpectations expect{.issuer = options_.issuer,
                                       .client_id = options_.client_id,
                                       .nonce = nonce,
                                       .without_nonce = nonce.empty(),
                                       .now = clock_.now(),
                                       .leeway = options_.leeway};
  auto keys = co_await this->keys(false);
  if (!keys) co_return fail(keys.error());
  auto verified = identity::verifyIdToken(id_token, *keys, expect);
  if (!verified && verified.error().code == ErrorCode::kNotFound) {
    // The provider may have rotated its keys since they were fetched.
    keys = co_await this->keys(true);
    if (!keys) co_return fail(keys.error());
    verified = identity::verifyIdToken(id_token, *keys, expect);
  }
  if (!verified) {
    co_return fail(Error(ErrorCode::kUnauthenticated, verified.error().message));
  }
  SignedIn out;
  out.subject = verified->subject;
  out.claims = verified->claims;
  json claims = verified->claims;
  // Groups (and names) the ID token leaves out may be in userinfo, for the same subject only.
  if (!claims.contains(options_.groups_claim) && !m.userinfo_endpoint.empty() &&
      !access_token.empty()) {
    auto text = co_await get(m.userinfo_endpoint, access_token);
    if (!text) co_return fail(text.error());
    auto info = parseJson(*text, 16);
    if (!info || !info->is_object()) {
      co_return fail(unavailableProvider("answered userinfo with what is not a JSON object"));
    }
    if (stringOf(*info, "sub") != out.subject) {
      co_return fail(Error(ErrorCode::kUnauthenticated,
                           "the identity provider's userinfo is about another subject"));
    }
    for (auto it = info->begin(); it != info->end(); ++it) {
      if (!claims.contains(it.key())) claims[it.key()] = it.value();
    }
  }
  out.groups = identity::claimStrings(claims, options_.groups_claim);
  out.email = stringOf(claims, "email");
  out.display_name = stringOf(claims, "name");
  out.username = stringOf(claims, options_.username_claim.c_str());
  if (out.username.empty()) out.username = out.email;
  if (out.username.empty()) out.username = out.subject;
  co_return out;
}

}  // namespace purser::sso
