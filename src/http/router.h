// Router: method + path pattern -> handler.
//
// Patterns are literal paths ("/healthz"), paths with named segments ("/api/v1/keys/{id}"), or a
// trailing catch-all ("/assets/*path"). Exact paths are found by hash lookup; patterns are tried
// in the order of their specificity (more literal segments first), so registration order does
// not matter. A path that matches a pattern under another method yields 405 with an Allow list;
// HEAD falls back to the GET handler. Routes are added before the server starts and never
// after: the table is read concurrently without locks.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "http/message.h"

namespace purser::http {

using AsyncHandler = std::function<asio::awaitable<Response>(Request&)>;
using SyncHandler = std::function<Response(Request&)>;

struct Route {
  Method method;
  std::string pattern;
  std::variant<SyncHandler, AsyncHandler> handler;
  // Per-route state the server keeps (metrics); opaque to the router.
  std::shared_ptr<void> server_data;
};

class Router {
 public:
  // Both return an error for a malformed pattern or a duplicate (method, pattern).
  Result<void> add(Method method, std::string pattern, SyncHandler handler);
  Result<void> addAsync(Method method, std::string pattern, AsyncHandler handler);

  struct Match {
    Route* route = nullptr;  // null: not found or method not allowed
    std::string allow;       // when the path exists under other methods: "GET, POST"
  };
  // On a match, fills request.params.
  Match match(Request& request) const;

  std::vector<Route*> routes();

 private:
  struct Segment {
    enum Kind { kLiteral, kParam, kCatchAll } kind;
    std::string text;  // the literal, or the parameter's name
  };
  struct Pattern {
    std::vector<Segment> segments;
    int literals = 0;
    std::vector<std::unique_ptr<Route>> by_method;
  };
  Result<void> addRoute(Method method, std::string pattern,
                        std::variant<SyncHandler, AsyncHandler> handler);
  static bool matches(const Pattern& p, std::string_view path,
                      std::vector<std::pair<std::string, std::string>>* params);
  static Route* findMethod(const Pattern& p, Method method);

  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, Pattern, StringHash, std::equal_to<>> exact_;
  std::vector<std::unique_ptr<Pattern>> patterns_;  // sorted, most specific first
};

}  // namespace purser::http
