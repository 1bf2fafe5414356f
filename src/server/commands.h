// Every subcommand of the `purser` binary. The composition root knows them all; later
// components add theirs to allCommands().
#pragma once

#include <vector>

#include "cli/cli.h"

namespace purser::server {

std::vector<cli::CommandRegistrar> allCommands();

}  // namespace purser::server
