// Rules of the source tree that keep whole classes of bugs out, checked on every build:
//   - outside bytes become JSON values, and JSON values become text, only through common/json
//     (parseJson bounds nesting; writeJson never throws on invalid UTF-8), and YAML is loaded
//     only through config/yaml_reader (UTF-8, nesting and alias expansion checked).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

namespace purser {
namespace {

namespace fs = std::filesystem;

struct Rule {
  std::regex pattern;
  std::vector<std::string> allowed;  // files (relative to src/) where the pattern belongs
  std::string why;
};

TEST(SourceRulesTest, OutsideBytesBecomeJsonAndYamlOnlyThroughTheirCheckedDoors) {
  const std::vector<Rule> rules = {
      {std::regex(R"((\.|->)dump\s*\()"),
       {"common/json.cc"},
       "write JSON with writeJson() (common/json.h): dump() throws on invalid UTF-8"},
      {std::regex(R"(\b(json|Json|nlohmann::json)::parse\s*\()"),
       {"common/json.cc"},
       "parse JSON with parseJson() (common/json.h): it bounds the nesting first"},
      {std::regex(R"(YAML::Load(All|File)?\s*\()"),
       {"config/yaml_reader.cc"},
       "load YAML with config::parseYaml() or parseYamlStream(): they check UTF-8, nesting and "
       "alias expansion"},
  };
  const fs::path src = fs::path(PURSER_SOURCE_DIR) / "src";
  int files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(src)) {
    if (!entry.is_regular_file()) continue;
    const auto ext = entry.path().extension();
    if (ext != ".cc" && ext != ".h") continue;
    ++files;
    const std::string rel = fs::relative(entry.path(), src).generic_string();
    std::ifstream in(entry.path());
    std::string line;
    int number = 0;
    while (std::getline(in, line)) {
      ++number;
      const auto comment = line.find("//");
      const std::string code = comment == std::string::npos ? line : line.substr(0, comment);
      for (const auto& rule : rules) {
        if (std::find(rule.allowed.begin(), rule.allowed.end(), rel) != rule.allowed.end()) {
          continue;
        }
        if (std::regex_search(code, rule.pattern)) {
          ADD_FAILURE() << "src/" << rel << ":" << number << ": " << rule.why << "\n  " << line;
        }
      }
    }
  }
  EXPECT_GT(files, 50) << "the source tree was not found";
}

}  // namespace
}  // namespace purser
