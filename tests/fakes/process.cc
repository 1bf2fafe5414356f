#include "fakes/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>

namespace purser::testing {
namespace {
constexpr int kSafetyTimeoutMs = 60'000;
}

Process::Process(const std::vector<std::string>& argv, const std::string& cwd,
                 const std::vector<std::string>& env) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    throw std::runtime_error("pipe failed");
  }
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) ::_exit(126);
    for (const auto& e : env) ::putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  out_fd_ = out[0];
  err_fd_ = err[0];
}

Process::~Process() {
  if (!status_) {
    ::kill(pid_, SIGKILL);
    wait();
  }
  if (out_fd_ >= 0) ::close(out_fd_);
  if (err_fd_ >= 0) ::close(err_fd_);
}

std::optional<std::string> Process::waitFor(int fd, std::string& buffer, size_t& scanned,
                                            const std::string& needle) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(kSafetyTimeoutMs);
  for (;;) {
    // Look for a complete line holding the needle.
    size_t eol;
    while ((eol = buffer.find('\n', scanned)) != std::string::npos) {
      const std::string line = buffer.substr(scanned, eol - scanned);
      scanned = eol + 1;
      if (line.find(needle) != std::string::npos) return line;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return std::nullopt;
    char buf[4096];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return std::nullopt;
    buffer.append(buf, static_cast<size_t>(n));
  }
}

std::optional<std::string> Process::waitForStdout(const std::string& needle) {
  return waitFor(out_fd_, out_, out_scanned_, needle);
}

std::optional<std::string> Process::waitForStderr(const std::string& needle) {
  return waitFor(err_fd_, err_, err_scanned_, needle);
}

void Process::signal(int sig) { ::kill(pid_, sig); }

void Process::drain() {
  // Read both pipes to their end (the child has exited, so they will close).
  for (int* fd : {&out_fd_, &err_fd_}) {
    std::string& buf = fd == &out_fd_ ? out_ : err_;
    char tmp[4096];
    ssize_t n;
    while ((n = ::read(*fd, tmp, sizeof tmp)) > 0) buf.append(tmp, static_cast<size_t>(n));
  }
}

int Process::wait() {
  if (!status_) {
    int st = 0;
    ::waitpid(pid_, &st, 0);
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    drain();
  }
  return *status_;
}

uint16_t portFromListeningLine(const std::string& line) {
  const size_t colon = line.rfind(':');
  return static_cast<uint16_t>(std::stoi(line.substr(colon + 1)));
}

}  // namespace purser::testing
