#include "common/assert.h"

#include <cstdio>
#include <cstdlib>

namespace purser::detail {

void checkFailed(const char* expr, const char* file, int line, const char* msg) {
  std::fprintf(stderr, "purser: invariant violated at %s:%d: %s %s\n", file, line, expr, msg);
  std::fflush(stderr);
  std::abort();
}

}  // namespace purser::detail
