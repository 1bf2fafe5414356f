#include "fakes/postgres.h"

#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace purser::testing {

namespace {

std::string commandOutput(const std::string& command) {
  std::string out;
  FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) return out;
  std::array<char, 512> buf{};
  while (std::fgets(buf.data(), buf.size(), p) != nullptr) out += buf.data();
  ::pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

PostgresServer::PostgresServer() {
  bindir_ = commandOutput("pg_config --bindir 2>/dev/null");
  if (bindir_.empty() || !std::filesystem::exists(bindir_ + "/initdb") ||
      !std::filesystem::exists(bindir_ + "/pg_ctl")) {
    why_ =
        "PostgreSQL's server is not installed (initdb and pg_ctl under `pg_config --bindir`); "
        "scripts/setup installs the postgresql package";
    return;
  }
  char tmpl[] = "/tmp/purser-pg-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    why_ = "cannot make a temporary directory";
    return;
  }
  dir_ = tmpl;
  if (::geteuid() == 0) {
    const passwd* pg = ::getpwnam("postgres");
    if (pg == nullptr) {
      why_ = "running as root and there is no `postgres` user to run the server as";
      return;
    }
    if (::chown(dir_.c_str(), pg->pw_uid, pg->pw_gid) != 0) {
      why_ = "cannot give the temporary directory to the postgres user";
      return;
    }
    as_postgres_ = true;
  }
  ::chmod(dir_.c_str(), 0700);
  if (run(quote(bindir_ + "/initdb") + " -D " + quote(dir_ + "/data") +
          " -A trust -U purser -E UTF8 --no-instructions > " + quote(dir_ + "/initdb.log") +
          " 2>&1") != 0) {
    why_ = "initdb failed: " + commandOutput("tail -5 " + quote(dir_ + "/initdb.log"));
    return;
  }
  if (!start()) {
    why_ = "the server did not start: " + commandOutput("tail -5 " + quote(dir_ + "/server.log"));
    return;
  }
  available_ = true;
}

PostgresServer::~PostgresServer() {
  if (dir_.empty()) return;
  thaw();
  stop(/*immediate=*/true);
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

int PostgresServer::run(const std::string& command) const {
  const std::string line =
      as_postgres_ ? "runuser -u postgres -- sh -c " + quote(command) : command;
  const int status = std::system(line.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

bool PostgresServer::start() {
  // No TCP at all: the socket lives in the test's directory. fsync stays on: commits are as
  // durable as in production.
  const std::string options = "-c listen_addresses='' -k " + dir_ + " -p 5432";
  return run(quote(bindir_ + "/pg_ctl") + " -D " + quote(dir_ + "/data") + " -l " +
             quote(dir_ + "/server.log") + " -w -t 60 -o " + quote(options) +
             " start > /dev/null") == 0;
}

namespace {

// The postmaster's pid (the first line of postmaster.pid) and every process whose parent it is.
std::vector<pid_t> serverProcesses(const std::string& data_dir) {
  std::vector<pid_t> out;
  std::ifstream pidfile(data_dir + "/postmaster.pid");
  long postmaster = 0;
  if (!(pidfile >> postmaster) || postmaster <= 0) return out;
  out.push_back(static_cast<pid_t>(postmaster));
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // pid (comm) state ppid ...: the comm may hold spaces, so read after its closing parenthesis.
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 1));
    char state = 0;
    long ppid = 0;
    if (rest >> state >> ppid && ppid == postmaster)
      out.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return out;
}

}  // namespace

bool PostgresServer::freeze() {
  const auto pids = serverProcesses(dir_ + "/data");
  if (pids.empty()) return false;
  for (pid_t pid : pids) ::kill(pid, SIGSTOP);
  frozen_ = true;
  return true;
}

void PostgresServer::thaw() {
  if (!frozen_) return;
  for (pid_t pid : serverProcesses(dir_ + "/data")) ::kill(pid, SIGCONT);
  frozen_ = false;
}

bool PostgresServer::stop(bool immediate) {
  return run(quote(bindir_ + "/pg_ctl") + " -D " + quote(dir_ + "/data") + " -w -t 60 -m " +
             (immediate ? "immediate" : "fast") + " stop > /dev/null 2>&1") == 0;
}

std::string PostgresServer::url(const std::string& db) const {
  return "host=" + dir_ + " port=5432 user=purser dbname=" + db;
}

std::string PostgresServer::query(const std::string& db, const std::string& sql) const {
  // psql connects as `purser` over the socket (trust), so no runuser is needed.
  return commandOutput(quote(bindir_ + "/psql") + " -X -A -t -q -h " + quote(dir_) +
                       " -p 5432 -U purser -d " + quote(db) + " -c " + quote(sql) + " 2>/dev/null");
}

bool PostgresServer::createDatabase(const std::string& name) {
  return run(quote(bindir_ + "/createdb") + " -h " + quote(dir_) + " -p 5432 -U purser " +
             quote(name)) == 0;
}

}  // namespace purser::testing
