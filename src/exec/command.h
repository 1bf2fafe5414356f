// Runs a program to its end and captures what it printed: for the engines' own tools (sbatch,
// squeue, scontrol, scancel). Blocking; bounded in time and in output.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/result.h"

namespace purser::exec {

struct CommandResult {
  int exit_code = -1;  // -1: ended by a signal (or killed at the deadline)
  std::string out, err;
};

// Runs argv (PATH searched) with `env` added to this process's environment, stdin from
// /dev/null; kills it once `timeout` has passed. Output past `max_bytes` per stream is dropped.
// Fails (kUnavailable) only when the program cannot be run at all, or timed out.
Result<CommandResult> runCommand(const std::vector<std::string>& argv,
                                 const std::map<std::string, std::string>& env, Duration timeout,
                                 size_t max_bytes = 1 << 20);

// `text` quoted for a POSIX shell: 'it'\''s'.
std::string shellQuote(const std::string& text);

}  // namespace purser::exec
