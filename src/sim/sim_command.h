// `purser sim ...`: offline tools and simulators. `purser sim llm` runs the simulated model
// server (see llm_sim.h) until SIGTERM or SIGINT.
#pragma once

namespace CLI {
class App;
}

namespace purser::sim {

void registerSimCommands(CLI::App& root, int& exit_code);

}  // namespace purser::sim
