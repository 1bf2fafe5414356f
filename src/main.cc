// purser: one binary; its subcommands are listed by the composition root.
#include "cli/cli.h"
#include "server/commands.h"

int main(int argc, char** argv) {
  return purser::cli::run(argc, argv, purser::server::allCommands());
}
