// `purser serve` as integration tests run it: a process on loopback (port 0, read back from its
// "listening on" line) with a configuration written into a temporary directory, and a member
// of a tenant with a key to call the model API with.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "fakes/process.h"
#include "fakes/temp_dir.h"

namespace purser::testing {

struct Served {
  std::unique_ptr<Process> process;
  uint16_t port = 0;  // 0: it did not start (process->err() says why)
};

// Writes "listen: 127.0.0.1:0", "threads: THREADS" and `config` to DIR/purser.yaml and starts
// `binary serve` on it with its data in DIR/var and PURSER_ADMIN_KEY set to `admin_key`.
Served startServe(const std::string& binary, const TempDir& dir, const std::string& config,
                  const std::string& admin_key, int threads = 2);

// Configuration for one route, "chat", to model "m" of an OpenAI-compatible server on
// 127.0.0.1:PORT (`purser sim llm`), priced 10 and 100 per million input and output tokens:
// the providers, routes and prices keys.
std::string chatRouteConfig(uint16_t upstream_port);

struct Member {
  std::string tenant, team, user, key;
};

// Creates tenant "acme", its team "ml", user "dana" and a key of hers through the admin API;
// a step that fails is a test failure and leaves its field empty.
Member seedMember(uint16_t port, const std::string& admin_key);

}  // namespace purser::testing
