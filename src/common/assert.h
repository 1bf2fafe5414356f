// Three levels of assertion (docs/architecture.md, "How code is written"):
//   PURSER_ASSERT(cond)  debug builds only; documents an assumption on a hot path.
//   PURSER_CHECK(cond)   always on; a broken invariant (the ledger going negative) aborts with a
//                        message rather than corrupting state.
// Never assert on input from the network, the store or a file: return an Error instead.
#pragma once

namespace purser::detail {
[[noreturn]] void checkFailed(const char* expr, const char* file, int line, const char* msg);
}  // namespace purser::detail

#define PURSER_CHECK(cond)                                                     \
  do {                                                                         \
    if (!(cond)) ::purser::detail::checkFailed(#cond, __FILE__, __LINE__, ""); \
  } while (0)

#define PURSER_CHECK_MSG(cond, msg)                                             \
  do {                                                                          \
    if (!(cond)) ::purser::detail::checkFailed(#cond, __FILE__, __LINE__, msg); \
  } while (0)

#ifdef NDEBUG
#define PURSER_ASSERT(cond) \
  do {                      \
  } while (false && (cond))
#else
#define PURSER_ASSERT(cond) PURSER_CHECK(cond)
#endif
