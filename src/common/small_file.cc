#include "common/small_file.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace purser {

Result<std::string> readSmallFile(const std::string& path, const std::string& what,
                                  size_t max_bytes) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) {
    return fail(invalidArgument(fmt::format("cannot read {} {}: {}", what, path, ec.message())));
  }
  if (size > max_bytes) {
    const std::string limit = max_bytes % (1 << 20) == 0 ? fmt::format("{} MiB", max_bytes >> 20)
                                                         : fmt::format("{} KiB", max_bytes / 1024);
    return fail(invalidArgument(fmt::format("{} {} is larger than {}", what, path, limit)));
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) return fail(invalidArgument(fmt::format("cannot read {} {}", what, path)));
  return text.str();
}

}  // namespace purser
