// A private PostgreSQL server for a test: `initdb` into a fresh directory, started with
// `pg_ctl` on a Unix socket in that directory (no TCP port, so tests never collide), stopped and
// removed at the end. Run as root (as CI does), the server runs as the `postgres` system user,
// since PostgreSQL refuses to run as root. When the server's binaries are missing, available()
// is false and why() says so, for a test to skip with the reason.
#pragma once

#include <string>

namespace purser::testing {

class PostgresServer {
 public:
  PostgresServer();  // initialises and starts it
  ~PostgresServer();
  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;

  bool available() const { return available_; }
  const std::string& why() const { return why_; }

  // A libpq connection string for database `db` (created by createDatabase, or "postgres").
  std::string url(const std::string& db = "postgres") const;
  // Creates a fresh database; false on failure.
  bool createDatabase(const std::string& name);

  // Runs one SQL statement with psql in database `db`: the rows, one per line, columns split by
  // '|' ("" when it failed or returned nothing). For tests to read what a server wrote.
  std::string query(const std::string& db, const std::string& sql) const;

  // pg_ctl stop -m fast (clean) or -m immediate (as a crash: no checkpoint), and start again.
  bool stop(bool immediate = false);
  bool start();
  // Freezes the server and every backend (SIGSTOP), as a host that hangs: connections stay open
  // and nothing answers. thaw() (SIGCONT) lets it go on; the destructor thaws it too.
  bool freeze();
  void thaw();

 private:
  // Runs a server binary (as the postgres user when this process is root); its exit status.
  int run(const std::string& command) const;

  bool available_ = false;
  std::string why_;
  std::string bindir_;
  std::string dir_;  // holds data/ and the socket
  bool as_postgres_ = false;
  bool frozen_ = false;
};

}  // namespace purser::testing
