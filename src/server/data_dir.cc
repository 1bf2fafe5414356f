#include "server/data_dir.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace purser::server {

Result<std::unique_ptr<DataDir>> DataDir::open(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) {
    return fail(
        unavailable(fmt::format("cannot create data directory \"{}\": {}", path, ec.message())));
  }
  // Purser's alone: nothing in it is for another user (keys, the ledger, pods' logs).
  if (struct stat st{};
      ::stat(path.c_str(), &st) == 0 && st.st_uid == ::geteuid() && (st.st_mode & 077) != 0) {
    ::chmod(path.c_str(), 0700);
  }
  const std::string lock_path = path + "/purser.lock";
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return fail(
        unavailable(fmt::format("cannot open \"{}\": {}", lock_path, std::strerror(errno))));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char pid[32] = {};
    const ssize_t n = ::pread(fd, pid, sizeof pid - 1, 0);
    ::close(fd);
    return fail(
        Error(ErrorCode::kFailedPrecondition,
              fmt::format("data directory \"{}\" is in use by another purser process{}", path,
                          n > 0 ? fmt::format(" (pid {})", std::string(pid, static_cast<size_t>(n)))
                                : "")));
  }
  const std::string me = std::to_string(::getpid());
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) < 0) {
    // The pid is only a hint for the message above; the lock is what matters.
  }
  return std::unique_ptr<DataDir>(new DataDir(path, fd));
}

DataDir::~DataDir() { ::close(lock_fd_); }

}  // namespace purser::server
