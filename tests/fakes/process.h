// A child process for integration tests: started with pipes on stdout and stderr, read line by
// line with a safety timeout, signalled and reaped. The destructor kills what is still running.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace purser::testing {

class Process {
 public:
  // `env`: extra environment variables ("NAME=value") on top of this process's own.
  Process(const std::vector<std::string>& argv, const std::string& cwd = {},
          const std::vector<std::string>& env = {});
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  // Reads stdout until a line contains `needle`; returns that line (nullopt at EOF or timeout).
  std::optional<std::string> waitForStdout(const std::string& needle);
  std::optional<std::string> waitForStderr(const std::string& needle);
  void signal(int sig);
  // Waits for exit; returns the exit code, or 128 + signal when killed.
  int wait();
  // Everything read from each stream so far (after wait(), all of it).
  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }

 private:
  std::optional<std::string> waitFor(int fd, std::string& buffer, size_t& scanned,
                                     const std::string& needle);
  void drain();
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  std::string out_, err_;
  size_t out_scanned_ = 0, err_scanned_ = 0;
  std::optional<int> status_;
};

// "http://127.0.0.1:41234" from a line "purser: listening on http://127.0.0.1:41234".
uint16_t portFromListeningLine(const std::string& line);

}  // namespace purser::testing
