#include "gateway/secrets.h"
#include "common/crypto.h"
#include "common/json.h"
#include "common/secret_key.h"

#include <fmt/format.h>
#include <openssl/evp.h>
#include <nlohmann/json.hpp>

#include <memory>

namespace purser::gateway {

namespace {

constexpr size_t kNonce = 12;
constexpr size_t kTag = 16;

using CipherCtx = std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)>;

// AES-256-GCM, fetched once under the default property query (FIPS's when crypto.fips is set).
const EVP_CIPHER* aes256Gcm() {
  static EVP_CIPHER* const cipher = EVP_CIPHER_fetch(nullptr, "AES-256-GCM", nullptr);
  return cipher;
}

Error cryptoError(std::string_view what) {
  return internalError(fmt::format("AES-256-GCM {} failed", what));
}

}  // namespace

Result<Sealer> Sealer::fromHex(std::string_view hex) {
  auto key = PURSER_TRY_VALUE(secretKeyFromHex(hex, "the master key"));
  return Sealer(key);
}

Result<Sealer> Sealer::open(const std::optional<std::string>& env_value,
                            const std::string& key_file, Random& random) {
  auto key =
      PURSER_TRY_VALUE(loadOrCreateSecretKey(env_value, "PURSER_MASTER_KEY", key_file, random));
  return Sealer(key);
}

Result<std::string> Sealer::seal(std::string_view plaintext, std::string_view associated,
                                 Random& random) const {
  std::string out(kNonce + plaintext.size() + kTag, '\0');
  auto* bytes = reinterpret_cast<unsigned char*>(out.data());
  random.fill(std::span<uint8_t>(bytes, kNonce));
  CipherCtx ctx(EVP_CIPHER_CTX_new(), EVP_CIPHER_CTX_free);
  int len = 0;
  if (!ctx || aes256Gcm() == nullptr ||
      EVP_EncryptInit_ex(ctx.get(), aes256Gcm(), nullptr, key_.data(), bytes) != 1 ||
      EVP_EncryptUpdate(ctx.get(), nullptr, &len,
                        reinterpret_cast<const unsigned char*>(associated.data()),
                        static_cast<int>(associated.size())) != 1 ||
      EVP_EncryptUpdate(ctx.get(), bytes + kNonce, &len,
                        reinterpret_cast<const unsigned char*>(plaintext.data()),
                        static_cast<int>(plaintext.size())) != 1 ||
      EVP_EncryptFinal_ex(ctx.get(), bytes + kNonce + len, &len) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, kTag,
                          bytes + kNonce + plaintext.size()) != 1) {
    return fail(cryptoError("sealing"));
  }
  return out;
}

std::string Sealer::derive(std::string_view purpose) const {
  return crypto::hmacSha256(
      std::string_view(reinterpret_cast<const char*>(key_.data()), key_.size()),
      std::string("purser derived key: ") + std::string(purpose));
}

Result<std::string> Sealer::unseal(std::string_view sealed, std::string_view associated) const {
  if (sealed.size() < kNonce + kTag)
    return fail(Error(ErrorCode::kDataLoss, "a sealed value is truncated"));
  const auto* bytes = reinterpret_cast<const unsigned char*>(sealed.data());
  const size_t n = sealed.size() - kNonce - kTag;
  std::string out(n, '\0');
  CipherCtx ctx(EVP_CIPHER_CTX_new(), EVP_CIPHER_CTX_free);
  int len = 0;
  std::array<unsigned char, kTag> tag{};
  std::memcpy(tag.data(), bytes + kNonce + n, kTag);
  if (!ctx || aes256Gcm() == nullptr ||
      EVP_DecryptInit_ex(ctx.get(), aes256Gcm(), nullptr, key_.data(), bytes) != 1 ||
      EVP_DecryptUpdate(ctx.get(), nullptr, &len,
                        reinterpret_cast<const unsigned char*>(associated.data()),
                        static_cast<int>(associated.size())) != 1 ||
      EVP_DecryptUpdate(ctx.get(), reinterpret_cast<unsigned char*>(out.data()), &len,
                        bytes + kNonce, static_cast<int>(n)) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, kTag, tag.data()) != 1 ||
      EVP_DecryptFinal_ex(ctx.get(), reinterpret_cast<unsigned char*>(out.data()) + len, &len) !=
          1) {
    return fail(Error(ErrorCode::kDataLoss,
                      "a sealed value does not open with this master key (wrong key or tampered)"));
  }
  return out;
}

const std::vector<store::Migration>& ProviderKeyStore::migrations() {
  static const std::vector<store::Migration> kMigrations = {
      {1, "sealed provider keys",
       "CREATE TABLE provider_keys (provider TEXT PRIMARY KEY, sealed BLOB NOT NULL,"
       " updated_at TEXT NOT NULL)"},
  };
  return kMigrations;
}

Result<void> ProviderKeyStore::put(store::Tx& tx, const std::string& provider,
                                   const std::vector<std::string>& keys) {
  const std::string sealed =
      PURSER_TRY_VALUE(sealer_.seal(writeJson(nlohmann::json(keys)), provider, random_));
  PURSER_TRY(
      tx.exec("INSERT INTO provider_keys (provider, sealed, updated_at) VALUES ($1, $2, $3)"
              " ON CONFLICT (provider) DO UPDATE SET sealed = excluded.sealed, updated_at = "
              "excluded.updated_at",
              {provider, store::Blob{sealed}, formatRfc3339(clock_.now())}));
  return {};
}

Result<bool> ProviderKeyStore::remove(store::Tx& tx, const std::string& provider) {
  const int64_t removed =
      PURSER_TRY_VALUE(tx.exec("DELETE FROM provider_keys WHERE provider = $1", {provider}));
  return removed > 0;
}

Result<std::vector<std::pair<std::string, std::vector<std::string>>>> ProviderKeyStore::loadAll() {
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  PURSER_TRY(store_.read([&](store::Tx& tx) -> Result<void> {
    auto rows =
        PURSER_TRY_VALUE(tx.query("SELECT provider, sealed FROM provider_keys ORDER BY provider"));
    for (const auto& r : rows) {
      const std::string provider = r.getText(0);
      const std::string plain = PURSER_TRY_VALUE(sealer_.unseal(r.getBlob(1).bytes, provider));
      auto list = parseJsonOrDiscarded(plain);
      if (!list.is_array()) return fail(Error(ErrorCode::kDataLoss, "unreadable provider keys"));
      std::vector<std::string> keys;
      for (const auto& k : list) keys.push_back(k.get<std::string>());
      out.emplace_back(provider, std::move(keys));
    }
    return {};
  }));
  return out;
}

ledger::Change ProviderKeyStore::replacement(std::string provider, std::vector<std::string> keys) {
  return [this, provider = std::move(provider), keys = std::move(keys)](store::Tx& tx) {
    return put(tx, provider, keys);
  };
}

ledger::Change ProviderKeyStore::removal(std::string provider) {
  return [this, provider = std::move(provider)](store::Tx& tx) -> Result<void> {
    PURSER_TRY(remove(tx, provider));
    return {};
  };
}

}  // namespace purser::gateway
