// The bare HTTP server for bench/http: Purser's HTTP core with one trivial handler, so the
// benchmark measures the server itself against nginx returning the same bytes.
//
//   bare_server PORT THREADS
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <future>

#include "http/router.h"
#include "http/server.h"
#include "http/workers.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: bare_server PORT THREADS\n");
    return 2;
  }
  using namespace purser::http;
  Workers workers(static_cast<size_t>(std::atoi(argv[2])));
  Router router;
  MetricsRegistry metrics;
  (void)router.add(Method::kGet, "/",
                   [](Request&) { return Response::text(200, "hello, world\n", "text/plain"); });
  ServerOptions options;
  options.port = static_cast<uint16_t>(std::atoi(argv[1]));
  options.max_requests_per_connection = 0;
  Server server(options, router, workers, metrics);
  if (auto r = server.listen(); !r) {
    std::fprintf(stderr, "bare_server: %s\n", r.error().toString().c_str());
    return 1;
  }
  server.start();
  // SIGTERM/SIGINT end the run.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  workers.start();
  std::printf("listening on %d\n", server.port());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
  std::promise<void> drained;
  server.shutdown([&] { drained.set_value(); });
  drained.get_future().wait();
  workers.stop();
  workers.join();
  return 0;
}
