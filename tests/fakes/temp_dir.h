// A temporary directory removed with everything in it when the object goes away.
#pragma once

#include <filesystem>
#include <string>

namespace purser::testing {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Writes `content` to `path`, replacing it.
void writeFile(const std::string& path, const std::string& content);
// The whole of `path` ("" when it cannot be read).
std::string readFile(const std::string& path);

}  // namespace purser::testing
