// Rules of the source tree that keep whole classes of bugs out, checked on every build:
//   - outside bytes become JSON values, and JSON values become text, only through common/json
//     (parseJson bounds nesting; writeJson never throws on invalid UTF-8), and YAML is loaded
//     only through config/yaml_reader (UTF-8, nesting and alias expansion checked);
//   - the fleet's engines (src/fleet) are pure: they include nothing of Purser's outside
//     src/common, and neither files, YAML nor a clock (DESIGN.md §2);
//   - time is read only through the Clock of common/clock.h, so that tests can drive it with a
//     ManualClock: no std::chrono clock's now() anywhere else;
//   - cryptography goes through common/crypto (OpenSSL's EVP, fetched algorithms, FIPS-ready):
//     no deprecated low-level calls, no randomness for secrets but OpenSSL's DRBG.
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

// Checks every line of code (comments left out) under src/ against `rules`.
void checkSourceRules(const std::vector<Rule>& rules) {
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
  checkSourceRules(rules);
}

TEST(SourceRulesTest, TimeIsReadOnlyThroughTheClock) {
  checkSourceRules({
      {std::regex(R"(\b(steady_clock|system_clock|high_resolution_clock)\s*::\s*now\s*\()"),
       {"common/clock.h", "common/clock.cc"},
       "read time from a Clock (common/clock.h: now(), monotonic()), injected, or "
       "SystemClock::instance() where nothing can pass one in"},
  });
}

TEST(SourceRulesTest, CryptographyGoesThroughTheEvpDoor) {
  checkSourceRules({
      {std::regex(R"(\b(SHA1|SHA224|SHA256|SHA384|SHA512|MD5|HMAC|AES_[a-z_]+|RSA_[a-z_]+|)"
                  R"(EC_KEY_[a-z_]+|DES_[a-z_]+)\s*\()"),
       {},
       "use common/crypto.h (EVP, fetched algorithms): OpenSSL's low-level calls are deprecated "
       "and bypass the FIPS provider"},
      {std::regex(R"(\bEVP_(sha|md5|aes_|des_|chacha)[a-z0-9_]*\s*\(\s*\))"),
       {},
       "fetch the algorithm by name (EVP_MD_fetch, EVP_CIPHER_fetch) once, as common/crypto.cc "
       "does"},
      {std::regex(R"(\b(getrandom|RAND_bytes|RAND_priv_bytes|arc4random)\s*\(|random_device)"),
       {"common/crypto.cc"},
       "draw secret bytes with crypto::randomBytes() (OpenSSL's DRBG, FIPS's under crypto.fips)"},
  });
}

TEST(SourceRulesTest, TheFleetEnginesArePure) {
  const std::regex project_include(R"re(^\s*#\s*include\s+"([a-z_]+)/)re");
  const std::regex outside(
      R"re(^\s*#\s*include\s+<(fstream|filesystem|chrono|thread|mutex|yaml-cpp/[a-z_./]+|sqlite3\.h|boost/[a-z_./]+)>)re");
  const std::regex clock(R"(\b(steady_clock|system_clock|high_resolution_clock)\b)");
  const fs::path dir = fs::path(PURSER_SOURCE_DIR) / "src" / "fleet";
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const auto ext = entry.path().extension();
    if (ext != ".cc" && ext != ".h") continue;
    ++files;
    std::ifstream in(entry.path());
    std::string line;
    int number = 0;
    while (std::getline(in, line)) {
      ++number;
      const std::string where =
          "src/fleet/" + entry.path().filename().string() + ":" + std::to_string(number) + ": ";
      std::smatch m;
      if (std::regex_search(line, m, project_include) && m[1] != "fleet" && m[1] != "common") {
        ADD_FAILURE() << where << "the engines include only src/common (reading, files and "
                      << "services belong in fleet_io or a service)\n  " << line;
      }
      if (std::regex_search(line, outside)) {
        ADD_FAILURE() << where << "no files, YAML, threads or clocks in the engines\n  " << line;
      }
      const auto comment = line.find("//");
      if (std::regex_search(comment == std::string::npos ? line : line.substr(0, comment), clock)) {
        ADD_FAILURE() << where << "time is passed in to the engines, never read\n  " << line;
      }
    }
  }
  EXPECT_GE(files, 6) << "src/fleet was not found";
}

}  // namespace
}  // namespace purser
