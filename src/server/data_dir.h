// DataDir: the directory holding a server's state (the SQLite database, later keys and logs),
// locked for the life of the process so two servers can never write the same state.
#pragma once

#include <memory>
#include <string>

#include "common/result.h"

namespace purser::server {

class DataDir {
 public:
  // Creates the directory if needed and takes its lock; fails clearly when another process holds
  // it or the directory cannot be created.
  static Result<std::unique_ptr<DataDir>> open(const std::string& path);
  ~DataDir();

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  DataDir(std::string path, int lock_fd) : path_(std::move(path)), lock_fd_(lock_fd) {}
  std::string path_;
  int lock_fd_;
};

}  // namespace purser::server
