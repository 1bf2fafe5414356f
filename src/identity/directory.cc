#include "identity/directory.h"

#include <algorithm>
#include <mutex>

#include <fmt/format.h>

#include "identity/keys.h"

namespace purser::identity {

namespace {

template <typename T>
std::vector<T> sortedValues(const std::unordered_map<std::string, T>& map) {
  std::vector<T> out;
  out.reserve(map.size());
  for (const auto& [_, v] : map) out.push_back(v);
  std::sort(out.begin(), out.end(), [](const T& a, const T& b) { return a.id < b.id; });
  return out;
}

template <typename T>
std::optional<T> find(const std::unordered_map<std::string, T>& map, const std::string& id) {
  auto it = map.find(id);
  if (it == map.end()) return std::nullopt;
  return it->second;
}

}  // namespace

std::string_view keyRefusalMessage(KeyRefusal reason) {
  switch (reason) {
    case KeyRefusal::kMissing:
      return "no API key was given";
    case KeyRefusal::kUnknown:
      return "invalid API key";
    case KeyRefusal::kRevoked:
      return "this API key was revoked";
    case KeyRefusal::kExpired:
      return "this API key has expired";
    case KeyRefusal::kParentRevoked:
      return "this API key was revoked (with the key it was made with)";
    case KeyRefusal::kParentExpired:
      return "this API key has expired (with the key it was made with)";
    case KeyRefusal::kOwnerDisabled:
      return "the user this API key belongs to is disabled";
  }
  return "invalid API key";
}

void Directory::load(Snapshot s) {
  std::unique_lock lock(mu_);
  loadLocked(std::move(s));
}

uint64_t Directory::generation() const {
  std::shared_lock lock(mu_);
  return generation_;
}

bool Directory::loadIfUnchanged(Snapshot s, uint64_t since) {
  std::unique_lock lock(mu_);
  if (generation_ != since) return false;
  loadLocked(std::move(s));
  return true;
}

void Directory::loadLocked(Snapshot s) {
  ++generation_;
  tenants_.clear();
  teams_.clear();
  users_.clear();
  accounts_.clear();
  keys_.clear();
  by_lookup_.clear();
  for (auto& t : s.tenants) tenants_[t.id] = std::move(t);
  for (auto& t : s.teams) teams_[t.id] = std::move(t);
  for (auto& u : s.users) users_[u.id] = std::move(u);
  for (auto& a : s.service_accounts) accounts_[a.id] = std::move(a);
  for (auto& k : s.keys) {
    by_lookup_[k.lookup] = k.id;
    keys_[k.id] = std::move(k);
  }
}

void Directory::put(const Tenant& t) {
  std::unique_lock lock(mu_);
  ++generation_;
  tenants_[t.id] = t;
}
void Directory::put(const Team& t) {
  std::unique_lock lock(mu_);
  ++generation_;
  teams_[t.id] = t;
}
void Directory::put(const User& u) {
  std::unique_lock lock(mu_);
  ++generation_;
  users_[u.id] = u;
}
void Directory::put(const ServiceAccount& s) {
  std::unique_lock lock(mu_);
  ++generation_;
  accounts_[s.id] = s;
}
void Directory::put(const ApiKey& k) {
  std::unique_lock lock(mu_);
  ++generation_;
  by_lookup_[k.lookup] = k.id;
  keys_[k.id] = k;
}

std::optional<Tenant> Directory::tenant(const std::string& id) const {
  std::shared_lock lock(mu_);
  return find(tenants_, id);
}

std::optional<Tenant> Directory::tenantByName(std::string_view name) const {
  std::shared_lock lock(mu_);
  for (const auto& [_, t] : tenants_) {
    if (t.name == name) return t;
  }
  return std::nullopt;
}

std::optional<Team> Directory::team(const std::string& id) const {
  std::shared_lock lock(mu_);
  return find(teams_, id);
}

std::vector<std::string> Directory::toolsOf(const ApiKey& k) const {
  if (!k.tools.empty()) return k.tools;
  std::shared_lock lock(mu_);
  if (auto team = find(teams_, k.team_id); team && !team->tools.empty()) return team->tools;
  if (auto tenant = find(tenants_, k.tenant_id)) return tenant->tools;
  return {};
}

std::optional<Team> Directory::teamByName(const std::string& tenant_id,
                                          std::string_view name) const {
  std::shared_lock lock(mu_);
  for (const auto& [_, t] : teams_) {
    if (t.tenant_id == tenant_id && t.name == name) return t;
  }
  return std::nullopt;
}

std::optional<User> Directory::user(const std::string& id) const {
  std::shared_lock lock(mu_);
  return find(users_, id);
}

std::optional<ServiceAccount> Directory::serviceAccount(const std::string& id) const {
  std::shared_lock lock(mu_);
  return find(accounts_, id);
}

std::optional<ApiKey> Directory::key(const std::string& id) const {
  std::shared_lock lock(mu_);
  return find(keys_, id);
}

std::vector<const ApiKey*> Directory::chainLocked(const ApiKey& k) const {
  std::vector<const ApiKey*> out = {&k};
  while (!out.back()->parent_key_id.empty() && out.size() <= kMaxKeyDepth) {
    auto it = keys_.find(out.back()->parent_key_id);
    if (it == keys_.end()) break;
    out.push_back(&it->second);
  }
  return out;
}

std::vector<ApiKey> Directory::keyChain(const std::string& id) const {
  std::shared_lock lock(mu_);
  auto it = keys_.find(id);
  if (it == keys_.end()) return {};
  std::vector<ApiKey> out;
  for (const ApiKey* k : chainLocked(it->second)) out.push_back(*k);
  return out;
}

std::vector<ApiKey> Directory::derivedKeys(const std::string& id) const {
  std::shared_lock lock(mu_);
  std::vector<ApiKey> out;
  for (const auto& [_, k] : keys_) {
    if (k.id == id) continue;
    for (const ApiKey* above : chainLocked(k)) {
      if (above != &k && above->id == id) {
        out.push_back(k);
        break;
      }
    }
  }
  std::sort(out.begin(), out.end(), [](const ApiKey& a, const ApiKey& b) { return a.id < b.id; });
  return out;
}

bool Directory::nameTaken(OwnerKind kind, const std::string& tenant_id,
                          std::string_view name) const {
  std::shared_lock lock(mu_);
  if (kind == OwnerKind::kUser) {
    return std::any_of(users_.begin(), users_.end(), [&](const auto& e) {
      return e.second.tenant_id == tenant_id && e.second.name == name;
    });
  }
  return std::any_of(accounts_.begin(), accounts_.end(), [&](const auto& e) {
    return e.second.tenant_id == tenant_id && e.second.name == name;
  });
}

std::vector<Tenant> Directory::tenants() const {
  std::shared_lock lock(mu_);
  return sortedValues(tenants_);
}
std::vector<Team> Directory::teams() const {
  std::shared_lock lock(mu_);
  return sortedValues(teams_);
}
std::vector<User> Directory::users() const {
  std::shared_lock lock(mu_);
  return sortedValues(users_);
}
std::vector<ServiceAccount> Directory::serviceAccounts() const {
  std::shared_lock lock(mu_);
  return sortedValues(accounts_);
}
std::vector<ApiKey> Directory::keys() const {
  std::shared_lock lock(mu_);
  return sortedValues(keys_);
}
size_t Directory::keyCount() const {
  std::shared_lock lock(mu_);
  return keys_.size();
}

std::expected<Principal, KeyRefused> Directory::verify(std::string_view presented) const {
  const auto refuse = [](KeyRefusal reason) {
    return std::unexpected(KeyRefused{reason, std::string(keyRefusalMessage(reason))});
  };
  if (presented.empty()) return refuse(KeyRefusal::kMissing);
  const PresentedKey p = presentedKey(presented);
  const std::string now = formatRfc3339(clock_.now());
  std::shared_lock lock(mu_);
  auto id = by_lookup_.find(p.lookup);
  if (id == by_lookup_.end()) return refuse(KeyRefusal::kUnknown);
  const ApiKey& k = keys_.at(id->second);
  const bool current = constantTimeEquals(p.hash, k.secret_hash);
  const bool previous = !current && !k.previous_hash.empty() &&
                        constantTimeEquals(p.hash, k.previous_hash) && now < k.previous_valid_until;
  if (!current && !previous) return refuse(KeyRefusal::kUnknown);
  return principalLocked(k, now);
}

std::expected<Principal, KeyRefused> Directory::principalLocked(const ApiKey& k,
                                                                const std::string& now) const {
  const auto refuse = [](KeyRefusal reason) {
    return std::unexpected(KeyRefused{reason, std::string(keyRefusalMessage(reason))});
  };
  if (!k.revoked_at.empty()) return refuse(KeyRefusal::kRevoked);
  if (!k.expires_at.empty() && now >= k.expires_at) return refuse(KeyRefusal::kExpired);
  Principal out;
  // A derived key stands only while every key above it does.
  for (const ApiKey* above : chainLocked(k)) {
    if (above != &k && !above->revoked_at.empty()) return refuse(KeyRefusal::kParentRevoked);
    if (above != &k && !above->expires_at.empty() && now >= above->expires_at) {
      return refuse(KeyRefusal::kParentExpired);
    }
    out.key_chain.push_back(above->id);
  }
  if (!k.parent_key_id.empty() &&
      (out.key_chain.size() < 2 || out.key_chain[1] != k.parent_key_id)) {
    return refuse(KeyRefusal::kUnknown);  // the key it was made with is gone
  }
  out.kind = k.owner_kind;
  out.id = k.owner_id;
  out.key_id = k.id;
  if (k.owner_kind == OwnerKind::kUser) {
    auto u = users_.find(k.owner_id);
    if (u == users_.end()) return refuse(KeyRefusal::kUnknown);
    if (!u->second.disabled_at.empty()) return refuse(KeyRefusal::kOwnerDisabled);
    out.name = u->second.name;
    out.tenant_id = u->second.tenant_id;
    out.team_id = u->second.team_id;
    out.role = u->second.role;
  } else {
    auto a = accounts_.find(k.owner_id);
    if (a == accounts_.end()) return refuse(KeyRefusal::kUnknown);
    out.name = a->second.name;
    out.tenant_id = a->second.tenant_id;
    out.team_id = a->second.team_id;
    out.role = Role::kServiceAccount;
  }
  return out;
}

std::optional<User> Directory::userBySubject(std::string_view subject) const {
  if (subject.empty()) return std::nullopt;
  std::shared_lock lock(mu_);
  for (const auto& [id, u] : users_) {
    if (u.subject == subject) return u;
  }
  return std::nullopt;
}

std::expected<Principal, KeyRefused> Directory::userPrincipal(const std::string& user_id) const {
  std::shared_lock lock(mu_);
  auto u = users_.find(user_id);
  if (u == users_.end()) {
    return std::unexpected(KeyRefused{KeyRefusal::kUnknown, "this user no longer exists"});
  }
  if (!u->second.disabled_at.empty()) {
    return std::unexpected(KeyRefused{KeyRefusal::kOwnerDisabled, "this user is disabled"});
  }
  Principal out;
  out.kind = OwnerKind::kUser;
  out.id = u->second.id;
  out.name = u->second.name;
  out.tenant_id = u->second.tenant_id;
  out.team_id = u->second.team_id;
  out.role = u->second.role;
  return out;
}

Result<Principal> Directory::authenticate(std::string_view presented) const {
  auto who = verify(presented);
  if (!who) return fail(Error(ErrorCode::kUnauthenticated, std::move(who.error().message)));
  return std::move(*who);
}

void Directory::setCertificateBindings(std::vector<CertificateBinding> bindings) {
  std::unique_lock lock(mu_);
  certificates_ = std::move(bindings);
  std::lock_guard cache_lock(cert_cache_mu_);
  cert_cache_.clear();  // what a subject resolves to may have changed
}

std::expected<Principal, KeyRefused> Directory::verifyCertificate(std::string_view subject) const {
  const auto refuse = [](KeyRefusal reason, std::string message) {
    return std::unexpected(KeyRefused{reason, std::move(message)});
  };
  const std::string now = formatRfc3339(clock_.now());
  std::shared_lock lock(mu_);
  {
    std::lock_guard cache_lock(cert_cache_mu_);
    auto cached = cert_cache_.find(std::string(subject));
    if (cached != cert_cache_.end() && cached->second.first == generation_) {
      auto key = keys_.find(cached->second.second);
      if (key != keys_.end()) return principalLocked(key->second, now);
    }
  }
  const auto binding =
      std::find_if(certificates_.begin(), certificates_.end(),
                   [&](const CertificateBinding& b) { return b.subject == subject; });
  if (subject.empty() || binding == certificates_.end()) {
    return refuse(
        KeyRefusal::kMissing,
        fmt::format("the client certificate \"{}\" is not mapped to a service account", subject));
  }
  const std::string who = binding->tenant + "/" + binding->account;
  const auto tenant = std::find_if(tenants_.begin(), tenants_.end(),
                                   [&](const auto& t) { return t.second.name == binding->tenant; });
  const auto account =
      tenant == tenants_.end()
          ? accounts_.end()
          : std::find_if(accounts_.begin(), accounts_.end(), [&](const auto& a) {
              return a.second.tenant_id == tenant->first && a.second.name == binding->account;
            });
  if (account == accounts_.end()) {
    return refuse(KeyRefusal::kUnknown,
                  fmt::format("the client certificate's service account {} does not exist", who));
  }
  std::vector<const ApiKey*> candidates;
  for (const auto& [_, k] : keys_) {
    if (k.owner_kind != OwnerKind::kServiceAccount || k.owner_id != account->first) continue;
    if (!binding->key_name.empty()) {
      if (k.name == binding->key_name) candidates.push_back(&k);
    } else if (k.revoked_at.empty() && (k.expires_at.empty() || now < k.expires_at)) {
      candidates.push_back(&k);
    }
  }
  if (!binding->key_name.empty() && candidates.size() > 1) {
    // Several keys of one name: the active one, if exactly one is.
    std::erase_if(candidates, [](const ApiKey* k) { return !k->revoked_at.empty(); });
  }
  if (candidates.size() != 1) {
    return refuse(
        KeyRefusal::kUnknown,
        binding->key_name.empty()
            ? fmt::format("the client certificate's service account {} has {} active keys; "
                          "tls.clients must name the one it stands for",
                          who, candidates.size())
            : fmt::format("the client certificate's service account {} has {} keys named \"{}\"",
                          who, candidates.size(), binding->key_name));
  }
  auto principal = principalLocked(*candidates.front(), now);
  if (principal) {
    std::lock_guard cache_lock(cert_cache_mu_);
    if (cert_cache_.size() >= 4 * certificates_.size() + 16) cert_cache_.clear();
    cert_cache_[std::string(subject)] = {generation_, candidates.front()->id};
  }
  return principal;
}

}  // namespace purser::identity
