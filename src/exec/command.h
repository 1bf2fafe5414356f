// What the executors share: running a program to its end and capturing what it printed (for the
// engines' own tools: sbatch, scontrol, scancel; blocking, bounded in time and in output), and
// reading the end of a log.
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
// /dev/null; kills it once `timeout` has passed on `clock`. Output past `max_bytes` per stream is
// dropped. Fails (kUnavailable) only when the program cannot be run at all, or timed out.
Result<CommandResult> runCommand(const std::vector<std::string>& argv,
                                 const std::map<std::string, std::string>& env, Duration timeout,
                                 size_t max_bytes = 1 << 20,
                                 const Clock& clock = SystemClock::instance());

// `text` quoted for a POSIX shell: 'it'\''s'.
std::string shellQuote(const std::string& text);

// Does http://HOST:PORT/PATH answer 200 within `timeout` (on `clock`)? (A model server's health
// check.) Both block on real descriptors: `clock` must be one that moves by itself.
bool httpOk(const std::string& host, int port, const std::string& path, Duration timeout,
            const Clock& clock = SystemClock::instance());

// The last `max_bytes` of a regular file ("" when it is not there, or is a link): the end of a
// pod's log.
std::string fileTail(const std::string& path, size_t max_bytes);

}  // namespace purser::exec
