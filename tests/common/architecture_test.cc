// The map stays true: docs/architecture.md's folder table says, for every folder of src/, which
// other folders it may include. This test reads that table and every #include of the tree, and
// fails when a file includes a folder its row does not name, when a folder has no row, or when a
// row names a folder that is not there. Changing what a folder depends on therefore means
// changing the map in the same commit.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace purser {
namespace {

namespace fs = std::filesystem;

std::string readAll(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

// folder -> the folders it may include ("every folder" reads as all of them).
std::map<std::string, std::set<std::string>> readTable(const std::string& doc,
                                                       const std::set<std::string>& folders) {
  std::map<std::string, std::set<std::string>> rows;
  const auto begin = doc.find("<!-- architecture-table");
  const auto end = doc.find("<!-- end of architecture-table");
  if (begin == std::string::npos || end == std::string::npos || end < begin) return rows;
  std::istringstream lines(doc.substr(begin, end - begin));
  const std::regex row(R"(^\|\s*`([a-z_]+)`\s*\|[^|]*\|([^|]*)\|)");
  const std::regex name(R"([a-z_]+)");
  std::string line;
  while (std::getline(lines, line)) {
    std::smatch m;
    if (!std::regex_search(line, m, row)) continue;
    std::set<std::string>& allowed = rows[m[1]];
    const std::string cell = m[2];
    if (cell.find("every folder") != std::string::npos) {
      allowed = folders;
      continue;
    }
    for (std::sregex_iterator it(cell.begin(), cell.end(), name), last; it != last; ++it) {
      allowed.insert(it->str());
    }
  }
  return rows;
}

TEST(ArchitectureTest, EveryIncludeIsOneTheMapAllows) {
  const fs::path root(PURSER_SOURCE_DIR);
  std::set<std::string> folders;
  for (const auto& entry : fs::directory_iterator(root / "src")) {
    if (entry.is_directory()) folders.insert(entry.path().filename().string());
  }
  ASSERT_GE(folders.size(), 10u) << "src/ was not found";
  const auto rows = readTable(readAll(root / "docs" / "architecture.md"), folders);
  ASSERT_FALSE(rows.empty()) << "docs/architecture.md has no folder table between its markers";
  for (const std::string& folder : folders) {
    EXPECT_TRUE(rows.contains(folder))
        << "src/" << folder << " has no row in docs/architecture.md's folder table";
  }
  for (const auto& [folder, allowed] : rows) {
    EXPECT_TRUE(folders.contains(folder))
        << "docs/architecture.md has a row for src/" << folder << ", which is not there";
    for (const std::string& a : allowed) {
      EXPECT_TRUE(folders.contains(a))
          << "the row of " << folder << " allows `" << a << "`, which is not a folder of src/";
    }
  }
  const std::regex include(R"re(^\s*#\s*include\s+"([a-z_]+)/)re");
  int checked = 0;
  for (const auto& entry : fs::recursive_directory_iterator(root / "src")) {
    const auto ext = entry.path().extension();
    if (!entry.is_regular_file() || (ext != ".cc" && ext != ".h")) continue;
    const fs::path rel = fs::relative(entry.path(), root / "src");
    if (rel.begin() == rel.end() || std::next(rel.begin()) == rel.end()) continue;  // main.cc
    const std::string folder = rel.begin()->string();
    const auto row = rows.find(folder);
    if (row == rows.end()) continue;  // reported above
    std::istringstream lines(readAll(entry.path()));
    std::string line;
    int number = 0;
    while (std::getline(lines, line)) {
      ++number;
      std::smatch m;
      if (!std::regex_search(line, m, include)) continue;
      const std::string target = m[1];
      if (target == folder || !folders.contains(target)) continue;
      ++checked;
      EXPECT_TRUE(row->second.contains(target))
          << "src/" << rel.generic_string() << ":" << number << " includes " << target
          << "/, which the row of " << folder << " in docs/architecture.md does not allow\n  "
          << line;
    }
  }
  EXPECT_GT(checked, 100) << "too few includes were read: is the tree there?";
}

// The map covers the threads too: a class that starts a thread is named in the threads table.
TEST(ArchitectureTest, EveryThreadOwnerIsInTheThreadTable) {
  const fs::path root(PURSER_SOURCE_DIR);
  const std::string doc = readAll(root / "docs" / "architecture.md");
  const auto table = doc.find("## Threads");
  ASSERT_NE(table, std::string::npos) << "docs/architecture.md has no threads section";
  const std::string threads = doc.substr(table);
  // A thread (or a pool of them) held or started: std::thread, std::jthread, asio::thread_pool —
  // not std::thread::hardware_concurrency, not a pool passed by reference.
  const std::regex starts(R"(\bstd::j?thread\b(?!::)|asio::thread_pool\b(?![&:]))");
  int found = 0;
  for (const auto& entry : fs::recursive_directory_iterator(root / "src")) {
    const auto ext = entry.path().extension();
    if (!entry.is_regular_file() || (ext != ".cc" && ext != ".h")) continue;
    const std::string rel = fs::relative(entry.path(), root / "src").generic_string();
    if (rel.starts_with("sim/") || rel.starts_with("cli/")) continue;  // not purser serve's
    std::istringstream lines(readAll(entry.path()));
    std::string line;
    bool starts_threads = false;
    while (std::getline(lines, line)) {
      const auto comment = line.find("//");
      const std::string code = comment == std::string::npos ? line : line.substr(0, comment);
      if (std::regex_search(code, starts)) starts_threads = true;
    }
    if (!starts_threads) continue;
    ++found;
    // The table names the file (its folder and stem: `http/workers` for http/workers.h).
    const std::string folder = rel.substr(0, rel.find('/'));
    const std::string named = folder + "/" + fs::path(rel).stem().string();
    EXPECT_TRUE(threads.find(named) != std::string::npos)
        << "src/" << rel << " holds or starts a thread; docs/architecture.md's threads table "
        << "does not name " << named;
  }
  EXPECT_GE(found, 5) << "no thread starts were found: is the tree there?";
}

}  // namespace
}  // namespace purser
