// Result<T>: the return type of everything that can fail on a request path.
//
// An alias of std::expected<T, Error>. Use `return fail(...)` or `return std::unexpected(err)`
// for errors and PURSER_TRY to propagate them without ceremony:
//
//   Result<Money> total = PURSER_TRY_VALUE(a.add(b));
#pragma once

#include <expected>
#include <utility>

#include "common/error.h"

namespace purser {

template <typename T>
using Result = std::expected<T, Error>;

inline std::unexpected<Error> fail(Error e) { return std::unexpected<Error>(std::move(e)); }
inline std::unexpected<Error> fail(ErrorCode code, std::string message) {
  return std::unexpected<Error>(Error(code, std::move(message)));
}

}  // namespace purser

// Evaluates `expr` (a Result<void>); returns its error from the enclosing function if it failed.
#define PURSER_TRY(expr)                                               \
  do {                                                                 \
    auto purser_try_result_ = (expr);                                  \
    if (!purser_try_result_) {                                         \
      return ::std::unexpected(std::move(purser_try_result_).error()); \
    }                                                                  \
  } while (0)

// Evaluates `expr` (a Result<T>) and yields its value; returns its error if it failed.
// A GNU statement expression: g++ and clang both support it.
#define PURSER_TRY_VALUE(expr)                                         \
  ({                                                                   \
    auto purser_try_result_ = (expr);                                  \
    if (!purser_try_result_) {                                         \
      return ::std::unexpected(std::move(purser_try_result_).error()); \
    }                                                                  \
    std::move(purser_try_result_).value();                             \
  })
