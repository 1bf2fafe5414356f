// The `purser` command line: CLI11 with one subcommand per verb. Subcommands come from the
// components that own them (the composition root lists them), so adding one never touches
// main.cc or this library.
//
//   purser --help              usage and the list of subcommands
//   purser version             version, commit, build type and compiler
//   purser serve ...           (from src/server)
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace purser::cli {

// Registers a subcommand on `root`. Its callback sets `exit_code` (0 on success).
using CommandRegistrar = std::function<void(CLI::App& root, int& exit_code)>;

// Parses argv and runs the chosen subcommand. Usage errors print a message naming the problem
// and a pointer to --help, and return a non-zero code.
int run(int argc, char** argv, const std::vector<CommandRegistrar>& commands);

struct BuildInfo {
  std::string version;
  std::string commit;
  std::string build_type;
  std::string compiler;
};
const BuildInfo& buildInfo();
// "purser 0.1.0 (commit 1a2b3c4d5e6f, Release, g++ 12.2.0)"
std::string versionLine();

}  // namespace purser::cli
