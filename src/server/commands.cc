#include "server/commands.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "cli/admin_commands.h"
#include "cli/diagnose_command.h"
#include "config/config.h"
#include "server/daemon.h"
#include "server/migrate.h"
#include "sim/sim_command.h"

namespace purser::server {

namespace {

void registerServe(CLI::App& root, int& exit_code) {
  struct Options {
    std::string config;
    std::string data;
    std::string listen;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = root.add_subcommand(
      "serve", "Run the gateway, governance, fleet engine and console in one process");
  cmd->add_option("-c,--config", opts->config, "Configuration file (YAML)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--data", opts->data,
                  "Data directory (replaces data_dir from the file; default ./var)");
  cmd->add_option("--listen", opts->listen,
                  "Address to listen on, host:port (replaces listen from the file)");
  cmd->callback([opts, &exit_code] {
    config::Overrides overrides;
    if (!opts->listen.empty()) overrides.listen = opts->listen;
    if (!opts->data.empty()) overrides.data_dir = opts->data;
    auto cfg = config::loadConfig(opts->config, overrides);
    if (!cfg) {
      std::cerr << "purser: " << cfg.error().toString() << "\n";
      exit_code = 2;
      return;
    }
    const std::string path = opts->config;
    auto result =
        serve(*cfg, std::cout, [path, overrides] { return config::loadConfig(path, overrides); });
    if (!result) {
      std::cerr << "purser: " << result.error().toString() << "\n";
      exit_code = 1;
      return;
    }
    exit_code = *result;
  });
}

}  // namespace

std::vector<cli::CommandRegistrar> allCommands() {
  return {registerServe, registerMigrateCommand, cli::registerAdminCommands,
          cli::registerDiagnoseCommand, sim::registerSimCommands};
}

}  // namespace purser::server
