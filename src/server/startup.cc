// The small steps of `purser serve`'s start: see startup.h.
#include "server/startup.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "store/postgres_store.h"
#include "store/sqlite_store.h"

namespace purser::server {

namespace {

const std::vector<store::Migration> kServerMigrations = {
    {1, "installation facts",
     "CREATE TABLE server_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"},
};

}  // namespace

const std::vector<store::Migration>& serverMigrations() { return kServerMigrations; }

Result<std::string> installationId(store::Store& store, IdGenerator& ids, const Clock& clock) {
  std::string id;
  PURSER_TRY(store.write([&](store::Tx& tx) -> Result<void> {
    auto rows =
        PURSER_TRY_VALUE(tx.query("SELECT value FROM server_meta WHERE key = 'installation_id'"));
    if (!rows.empty()) {
      id = rows[0].getText(0);
      return {};
    }
    id = ids.next();
    PURSER_TRY(
        tx.exec("INSERT INTO server_meta (key, value) VALUES ('installation_id', $1)", {id}));
    PURSER_TRY(tx.exec("INSERT INTO server_meta (key, value) VALUES ('created_at', $1)",
                       {formatRfc3339(clock.now())}));
    return {};
  }));
  return id;
}

Result<std::string> replicaName(const config::Config& c, const DataDir& dir, IdGenerator& ids) {
  if (!c.store.replica.empty()) return c.store.replica;
  const std::string path = dir.file("replica");
  std::ifstream in(path);
  std::string name;
  if (in && std::getline(in, name) && config::validReplicaName(name)) return name;
  name = "r-" + ids.next();
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  std::ofstream outf(path, std::ios::trunc);
  outf << name << "\n";
  outf.close();
  if (!outf) return fail(unavailable("cannot write " + path));
  return name;
}

std::optional<std::string> takeSecretEnv(const char* name) {
  char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  std::optional<std::string> out;
  if (*value != '\0') out = std::string(value);
  std::memset(value, 0, std::strlen(value));
  ::unsetenv(name);
  return out;
}

Result<std::unique_ptr<store::Store>> openStore(const config::Config& c, const DataDir& dir,
                                                const Clock& clock) {
  std::unique_ptr<store::Store> store;
  if (c.store.driver == "postgres") {
    store = PURSER_TRY_VALUE(store::PostgresStore::open(
        {.url = c.store.postgres,
         .max_readers = static_cast<size_t>(std::max<int64_t>(1, c.store.max_connections - 1))},
        clock));
    spdlog::info("store: PostgreSQL");
    if (auto warning = store::postgresTransportWarning(c.store.postgres))
      spdlog::warn("{}", *warning);
  } else {
    store = PURSER_TRY_VALUE(store::SqliteStore::open(
        {.path = dir.file("purser.db"),
         .busy_timeout =
             std::chrono::duration_cast<std::chrono::milliseconds>(c.store.busy_timeout)},
        clock));
  }
  return store;
}

void warnIfReadableByOthers(const config::Config& c) {
  if (c.file.empty()) return;
  if (struct stat st{}; ::stat(c.file.c_str(), &st) == 0 && (st.st_mode & 077) != 0) {
    spdlog::warn(
        "{} can be read by other users than Purser's; it may hold provider keys (chmod "
        "600 it)",
        c.file);
  }
}

http::ServerOptions serverOptions(const config::Config& c) {
  http::ServerOptions o;
  o.host = c.host;
  o.port = c.port;
  o.max_body_bytes = c.http.max_body_bytes;
  o.max_header_bytes = c.http.max_header_bytes;
  o.max_nesting = c.http.max_nesting_depth;
  o.max_connections = c.http.max_connections;
  o.max_requests_per_connection = c.http.max_requests_per_connection;
  o.idle_timeout = c.http.idle_timeout;
  o.header_timeout = c.http.header_timeout;
  o.body_timeout = c.http.body_timeout;
  o.write_timeout = c.http.write_timeout;
  o.drain_timeout = c.http.drain_timeout;
  if (c.tls) {
    o.tls = http::TlsOptions{.cert_file = c.tls->cert_file,
                             .key_file = c.tls->key_file,
                             .client_ca_file = c.tls->client_ca_file,
                             .min_version = c.tls->min_version};
    o.tls_watch_interval = c.tls->watch_interval;
  }
  return o;
}

std::vector<identity::CertificateBinding> certificateBindings(const config::Config& c) {
  std::vector<identity::CertificateBinding> out;
  if (!c.tls) return out;
  for (const auto& client : c.tls->clients) {
    const size_t slash = client.service_account.find('/');
    out.push_back({.subject = client.subject,
                   .tenant = client.service_account.substr(0, slash),
                   .account = slash == std::string::npos ? std::string()
                                                         : client.service_account.substr(slash + 1),
                   .key_name = client.key});
  }
  return out;
}

std::string advertisedAddress(const config::Config& c, uint16_t port) {
  std::string address = c.fleet.advertise;
  if (address.empty()) {
    std::string host = c.host;
    if (host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]") {
      char name[256] = {};
      host = ::gethostname(name, sizeof name - 1) == 0 ? name : "localhost";
    }
    if (host.find(':') != std::string::npos && !host.starts_with('[')) host = "[" + host + "]";
    address = fmt::format("http://{}:{}", host, port);
  }
  while (address.ends_with('/')) address.pop_back();
  return address;
}

}  // namespace purser::server
