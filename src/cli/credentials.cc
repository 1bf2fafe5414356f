#include "cli/credentials.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/json.h"
#include "common/small_file.h"

namespace purser::cli {

namespace {

using nlohmann::json;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

// The file's object, or an empty one when there is no file yet.
Result<json> readAll() {
  const std::string path = credentialsFile();
  if (!std::filesystem::exists(path)) return json::object();
  auto text = PURSER_TRY_VALUE(readSmallFile(path, "the CLI's credentials"));
  auto j = parseJson(text, 8);
  if (!j || !j->is_object()) {
    return fail(invalidArgument(fmt::format(
        "{} is not a credentials file of Purser's; remove it and sign in again", path)));
  }
  return std::move(*j);
}

// Written whole to a temporary file (mode 0600) and renamed over the old one.
Result<void> writeAll(const json& all) {
  const std::filesystem::path path = credentialsFile();
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) {
    return fail(invalidArgument(
        fmt::format("cannot make {}: {}", path.parent_path().string(), ec.message())));
  }
  const std::string tmp = path.string() + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return fail(invalidArgument(fmt::format("cannot write {}: {}", tmp, std::strerror(errno))));
  }
  const std::string text = writeJson(all, 2) + "\n";
  const bool ok = ::fchmod(fd, 0600) == 0 &&
                  ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                  ::fsync(fd) == 0;
  const int saved = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return fail(invalidArgument(
        fmt::format("cannot write {}: {}", path.string(), std::strerror(ok ? errno : saved))));
  }
  return {};
}

}  // namespace

std::string serverUrl(const std::string& flag) {
  std::string server = flag.empty() ? env("PURSER_SERVER") : flag;
  if (server.empty()) server = "http://127.0.0.1:8080";
  while (server.ends_with('/')) server.pop_back();
  return server;
}

std::string credentialsFile() {
  std::string base = env("XDG_CONFIG_HOME");
  if (base.empty()) base = env("HOME").empty() ? "." : env("HOME") + "/.config";
  return base + "/purser/credentials.json";
}

std::optional<std::string> credentialFor(const std::string& server) {
  if (const std::string key = env("PURSER_KEY"); !key.empty()) return key;
  auto all = readAll();
  if (!all) {
    std::cerr << "purser: " << all.error().message << "\n";
    return std::nullopt;
  }
  if (auto it = all->find(server); it != all->end() && it->is_object()) {
    const std::string token = it->value("token", "");
    auto expires = parseRfc3339(it->value("expires_at", ""));
    if (!token.empty() && expires && SystemClock::instance().now() < *expires) return token;
    if (!token.empty()) {
      std::cerr << "purser: your sign-in to " << server
                << " has expired; run `purser login --oidc` again\n";
      return std::nullopt;
    }
  }
  if (!env("PURSER_CLIENT_CERT").empty()) return std::string();
  std::cerr << "purser: set PURSER_KEY to your API key, sign in with `purser login --oidc`, or "
               "set PURSER_CLIENT_CERT and PURSER_CLIENT_KEY to a client certificate the server "
               "maps to a key\n";
  return std::nullopt;
}

Result<void> storeToken(const std::string& server, const std::string& token,
                        const std::string& expires_at) {
  json all = PURSER_TRY_VALUE(readAll());
  all[server] = {{"token", token}, {"expires_at", expires_at}};
  return writeAll(all);
}

Result<std::optional<std::string>> takeToken(const std::string& server) {
  json all = PURSER_TRY_VALUE(readAll());
  auto it = all.find(server);
  if (it == all.end()) return std::optional<std::string>();
  std::optional<std::string> token;
  if (it->is_object()) token = it->value("token", "");
  all.erase(it);
  PURSER_TRY(writeAll(all));
  return token;
}

}  // namespace purser::cli
