#include "cli/cli.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <iostream>

namespace purser::cli {

std::string versionLine() {
  const BuildInfo& b = buildInfo();
  return fmt::format("purser {} (commit {}, {}, {})", b.version, b.commit, b.build_type,
                     b.compiler);
}

int run(int argc, char** argv, const std::vector<CommandRegistrar>& commands) {
  CLI::App app{
      "Purser: one governed door to an organisation's GPUs and models.\n"
      "An LLM gateway, budgets and quotas, and a GPU fleet engine in one binary.",
      "purser"};
  app.require_subcommand(0, 1);
  app.fallthrough(false);
  app.set_version_flag("--version", versionLine());
  int exit_code = 0;

  CLI::App* version = app.add_subcommand("version", "Print the version and build of this binary");
  version->callback([] { std::cout << versionLine() << "\n"; });

  for (const auto& registrar : commands) registrar(app, exit_code);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ExtrasError& e) {
    const bool known =
        argc > 1 &&
        !app.get_subcommands([&](CLI::App* sub) { return sub->get_name() == argv[1]; }).empty();
    if (argc > 1 && argv[1][0] != '-' && !known) {
      std::cerr << "purser: unknown command \"" << argv[1]
                << "\"; run purser --help to see the commands\n";
      return 2;
    }
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    // CLI11 uses 0 for --help and --version; every usage error must be non-zero.
    return code == 0 ? 0 : 2;
  }
  if (app.get_subcommands().empty()) {
    std::cerr << app.help() << "\npurser: a command is required\n";
    return 2;
  }
  return exit_code;
}

}  // namespace purser::cli
