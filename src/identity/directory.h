// Directory: every tenant, team, user, service account and API key, indexed in memory so that
// authenticating a request and checking what a principal may touch never waits on the store.
// The store is the source of truth: the directory is loaded from it at start and updated after
// each committed change.
//
// Thread-safety: all methods may be called concurrently; lookups take a shared lock, updates an
// exclusive one. Lookups return copies.
#pragma once

#include <expected>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "identity/identity.h"

namespace purser::identity {

// Why a presented key was refused. Callers decide on this, never on the message.
enum class KeyRefusal {
  kMissing,  // no key was given
  // Not a key of this directory: unknown, a wrong secret, a previous secret past its grace, or
  // a key whose owner or parent key is gone. Alike on purpose, so a guess learns nothing.
  kUnknown,
  kRevoked,
  kExpired,
  kParentRevoked,  // a key above it (ApiKey::parent_key_id) was revoked
  kParentExpired,  // a key above it has expired
  kOwnerDisabled,  // the user it belongs to was disabled
};

// What a refusal says to people: "invalid API key", "this API key was revoked", ...
std::string_view keyRefusalMessage(KeyRefusal reason);

struct KeyRefused {
  KeyRefusal reason = KeyRefusal::kUnknown;
  std::string message;  // keyRefusalMessage(reason)
};

struct Snapshot {
  std::vector<Tenant> tenants;
  std::vector<Team> teams;
  std::vector<User> users;
  std::vector<ServiceAccount> service_accounts;
  std::vector<ApiKey> keys;
};

// A client certificate that stands for a service account's key (tls.clients): the subject as
// the server reads it from a verified certificate (RFC 2253), the account as TENANT/NAME, and
// the key's name (empty: the account's one active key).
struct CertificateBinding {
  std::string subject;
  std::string tenant;
  std::string account;
  std::string key_name;
};

class Directory {
 public:
  explicit Directory(const Clock& clock) : clock_(clock) {}

  void load(Snapshot snapshot);
  // Changes made so far (every load and put counts one).
  uint64_t generation() const;
  // Loads `snapshot` only if nothing changed since generation `since` (read before the snapshot
  // was): a snapshot read while this process wrote a row and put it must not undo the put.
  bool loadIfUnchanged(Snapshot snapshot, uint64_t since);
  void put(const Tenant& t);
  void put(const Team& t);
  void put(const User& u);
  void put(const ServiceAccount& s);
  void put(const ApiKey& k);

  std::optional<Tenant> tenant(const std::string& id) const;
  std::optional<Tenant> tenantByName(std::string_view name) const;
  std::optional<Team> team(const std::string& id) const;
  std::optional<Team> teamByName(const std::string& tenant_id, std::string_view name) const;
  std::optional<User> user(const std::string& id) const;
  // The user a person signing in through the identity provider is ("ISSUER#SUBJECT").
  std::optional<User> userBySubject(std::string_view subject) const;
  // The principal of a signed-in user (no key): kUnknown when the user is gone, kOwnerDisabled
  // when disabled.
  std::expected<Principal, KeyRefused> userPrincipal(const std::string& user_id) const;
  std::optional<ServiceAccount> serviceAccount(const std::string& id) const;
  std::optional<ApiKey> key(const std::string& id) const;
  // The key and the keys above it (ApiKey::parent_key_id), nearest first; empty when unknown.
  std::vector<ApiKey> keyChain(const std::string& id) const;
  // The keys derived from `id`, directly or through others.
  std::vector<ApiKey> derivedKeys(const std::string& id) const;
  bool nameTaken(OwnerKind kind, const std::string& tenant_id, std::string_view name) const;
  // The MCP tools a key may call: its own when it has any, else its team's grant, else its
  // tenant's (deny by default: empty when none of the three grants any).
  std::vector<std::string> toolsOf(const ApiKey& k) const;

  // Everything, sorted by id; callers filter by what the caller may see.
  std::vector<Tenant> tenants() const;
  std::vector<Team> teams() const;
  std::vector<User> users() const;
  std::vector<ServiceAccount> serviceAccounts() const;
  std::vector<ApiKey> keys() const;
  size_t keyCount() const;

  // The principal behind a presented key, or why it is refused: an unknown key or a wrong secret
  // (the same refusal either way), a revoked or expired key, or a deleted owner; a derived key
  // also when a key above it is revoked, expired or gone.
  std::expected<Principal, KeyRefused> verify(std::string_view presented) const;
  // The same, a refusal as kUnauthenticated with its message.
  Result<Principal> authenticate(std::string_view presented) const;

  // Client certificates mapped to keys; replaces the previous mapping.
  void setCertificateBindings(std::vector<CertificateBinding> bindings);
  // The principal a verified client certificate stands for: its binding's key, checked as a
  // presented key is (revoked, expired, a key above it, its owner gone). kMissing when the
  // subject is not mapped; kUnknown when its account or key cannot be found (or, without a key
  // name, the account has no or several active keys), each with a message saying which.
  std::expected<Principal, KeyRefused> verifyCertificate(std::string_view subject) const;

 private:
  std::vector<const ApiKey*> chainLocked(const ApiKey& k) const;
  // The principal behind a key whose secret (or certificate) was accepted, or why it stands no
  // more.
  std::expected<Principal, KeyRefused> principalLocked(const ApiKey& k,
                                                       const std::string& now) const;

  void loadLocked(Snapshot snapshot);

  const Clock& clock_;
  mutable std::shared_mutex mu_;
  uint64_t generation_ = 0;                                   // guarded by mu_
  std::unordered_map<std::string, Tenant> tenants_;           // guarded by mu_
  std::unordered_map<std::string, Team> teams_;               // guarded by mu_
  std::unordered_map<std::string, User> users_;               // guarded by mu_
  std::unordered_map<std::string, ServiceAccount> accounts_;  // guarded by mu_
  std::unordered_map<std::string, ApiKey> keys_;              // guarded by mu_
  std::unordered_map<std::string, std::string> by_lookup_;    // lookup -> key id; guarded by mu_
  std::vector<CertificateBinding> certificates_;              // guarded by mu_
  // Subject -> the key id it resolved to, and the generation it was resolved at: a mapped
  // certificate is found without scanning every key while nothing changed.
  mutable std::mutex cert_cache_mu_;
  mutable std::unordered_map<std::string, std::pair<uint64_t, std::string>>
      cert_cache_;  // guarded by cert_cache_mu_
};

}  // namespace purser::identity
