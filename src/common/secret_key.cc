#include "common/secret_key.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace purser {

Result<SecretKey> secretKeyFromHex(std::string_view hex, std::string_view what) {
  const auto refuse = [&] {
    return fail(invalidArgument(fmt::format("{} must be 64 hex characters (32 bytes)", what)));
  };
  if (hex.size() != 64) return refuse();
  SecretKey key{};
  for (size_t i = 0; i < key.size(); ++i) {
    unsigned value = 0;
    for (size_t j = 0; j < 2; ++j) {
      const char c = hex[2 * i + j];
      unsigned d;
      if (c >= '0' && c <= '9') {
        d = static_cast<unsigned>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        d = static_cast<unsigned>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        d = static_cast<unsigned>(c - 'A' + 10);
      } else {
        return refuse();
      }
      value = value * 16 + d;
    }
    key[i] = static_cast<uint8_t>(value);
  }
  return key;
}

Result<SecretKey> loadOrCreateSecretKey(const std::optional<std::string>& env_hex,
                                        std::string_view env_name, const std::string& key_file,
                                        Random& random) {
  if (env_hex) {
    auto k = secretKeyFromHex(*env_hex, env_name);
    if (!k) return fail(invalidArgument(fmt::format("{}: {}", env_name, k.error().message)));
    return k;
  }
  std::ifstream in(key_file);
  if (in) {
    std::string hex;
    std::getline(in, hex);
    auto k = secretKeyFromHex(hex, "the key");
    if (!k) return fail(invalidArgument(fmt::format("{}: {}", key_file, k.error().message)));
    return k;
  }
  // First use: a new random key, readable by this user only.
  SecretKey raw{};
  random.fill(raw);
  std::string hex;
  for (uint8_t b : raw) hex += fmt::format("{:02x}", b);
  const int fd = ::open(key_file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return fail(unavailable(
        fmt::format("cannot create key file \"{}\": {}", key_file, std::strerror(errno))));
  }
  const std::string line = hex + "\n";
  const bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) &&
                  ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) return fail(unavailable(fmt::format("cannot write key file \"{}\"", key_file)));
  return raw;
}

}  // namespace purser
