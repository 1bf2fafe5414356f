#include "exec/command.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>

extern char** environ;

namespace purser::exec {

std::string shellQuote(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

bool httpOk(const std::string& host, int port, const std::string& path, Duration timeout,
            const Clock& clock) {
  // An address (IPv4 or IPv6) or a host name (a Slurm node's).
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 ||
      found == nullptr) {
    return false;
  }
  sockaddr_storage addr{};
  const socklen_t addr_len = found->ai_addrlen;
  std::memcpy(&addr, found->ai_addr, found->ai_addrlen);
  const int family = found->ai_family;
  ::freeaddrinfo(found);
  const int fd = ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const MonoTime deadline = clock.monotonic() + timeout;
  const auto wait = [&](short events) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock.monotonic());
    if (left.count() <= 0) return false;
    pollfd p{fd, events, 0};
    return ::poll(&p, 1, static_cast<int>(left.count())) == 1 && (p.revents & events) != 0;
  };
  bool ok = false;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), addr_len) == 0 ||
      (errno == EINPROGRESS && wait(POLLOUT))) {
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    const std::string req = "GET " + path + " HTTP/1.0\r\nHost: " + host + "\r\n\r\n";
    if (err == 0 &&
        ::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size())) {
      std::string head;
      char buf[512];
      while (head.size() < 12 && wait(POLLIN)) {
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        head.append(buf, static_cast<size_t>(n));
      }
      // "HTTP/1.x 200"
      ok = head.size() >= 12 && head.compare(0, 5, "HTTP/") == 0 && head.compare(9, 3, "200") == 0;
    }
  }
  ::close(fd);
  return ok;
}

std::string fileTail(const std::string& path, size_t max_bytes) {
  // Never through a link: a log a workload could reach must not become a way to read another file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return {};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return {};
  }
  const off_t size = st.st_size;
  const off_t from = size > static_cast<off_t>(max_bytes) ? size - static_cast<off_t>(max_bytes) : 0;
  std::string out(static_cast<size_t>(size - from), '\0');
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::pread(fd, out.data() + got, out.size() - got, from + static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  out.resize(got);
  return out;
}

Result<CommandResult> runCommand(const std::vector<std::string>& argv,
                                 const std::map<std::string, std::string>& env, Duration timeout,
                                 size_t max_bytes, const Clock& clock) {
  if (argv.empty()) return fail(invalidArgument("no program to run"));
  std::vector<std::string> env_text;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const size_t eq = entry.find('=');
    if (eq != std::string::npos && env.count(entry.substr(0, eq)) != 0) continue;
    env_text.push_back(entry);
  }
  for (const auto& [k, v] : env) env_text.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (auto& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0)
    return fail(unavailable("pipe: " + std::string(strerror(errno))));
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]), ::close(out[1]);
    return fail(unavailable("pipe: " + std::string(strerror(errno))));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  const int spawned = ::posix_spawnp(&pid, args[0], &actions, &attr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(out[1]);
  ::close(err[1]);
  if (spawned != 0) {
    ::close(out[0]), ::close(err[0]);
    return fail(unavailable(fmt::format("cannot run {}: {}", argv[0], strerror(spawned))));
  }
  CommandResult r;
  const MonoTime deadline = clock.monotonic() + timeout;
  bool timed_out = false;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  int open = 2;
  char buf[16384];
  while (open > 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock.monotonic());
    if (left.count() <= 0) {
      timed_out = true;
      ::kill(pid, SIGKILL);
      break;
    }
    const int n = ::poll(fds, 2, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open;
        continue;
      }
      const size_t room = max_bytes > sinks[i]->size() ? max_bytes - sinks[i]->size() : 0;
      sinks[i]->append(buf, std::min(room, static_cast<size_t>(got)));
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) ::close(f.fd);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return fail(
        Error(ErrorCode::kUnavailable,
              fmt::format("{} did not answer within {} s", argv[0],
                          std::chrono::duration_cast<std::chrono::seconds>(timeout).count())));
  }
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace purser::exec
