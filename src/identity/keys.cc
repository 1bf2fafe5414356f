#include "identity/keys.h"

#include <fmt/format.h>

#include <array>

#include "common/crypto.h"

namespace purser::identity {

namespace {

constexpr std::string_view kAlphabet =
    "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

std::string randomBase62(Random& random, size_t length) {
  std::string out;
  out.reserve(length);
  while (out.size() < length) out.push_back(kAlphabet[random.uniform(kAlphabet.size())]);
  return out;
}

bool isPkFormat(std::string_view key) {
  if (!key.starts_with("pk-") || key.size() < 3 + 26 + 1 + 1) return false;
  return isValidId(key.substr(3, 26)) && key[29] == '-';
}

}  // namespace

std::string sha256Hex(std::string_view data) { return crypto::sha256Hex(data); }

bool constantTimeEquals(std::string_view a, std::string_view b) {
  return crypto::constantTimeEquals(a, b);
}

NewKey regenerateSecret(const std::string& id, Random& random) {
  // 43 base62 characters carry 256 bits.
  const std::string secret = randomBase62(random, 43);
  return {id, fmt::format("pk-{}-{}", id, secret), id, sha256Hex(secret)};
}

NewKey generateKey(IdGenerator& ids, Random& random) {
  return regenerateSecret(ids.next(), random);
}

PresentedKey presentedKey(std::string_view key) {
  if (isPkFormat(key)) {
    std::string id(key.substr(3, 26));
    for (char& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return {id, sha256Hex(key.substr(30))};
  }
  const std::string hash = sha256Hex(key);
  return {"h:" + hash.substr(0, 32), hash};
}

NewKey externalKey(std::string_view key) {
  const PresentedKey p = presentedKey(key);
  return {"", std::string(key), p.lookup, p.hash};
}

}  // namespace purser::identity
