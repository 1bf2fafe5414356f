#include "http/router.h"

#include <fmt/format.h>

#include <algorithm>

namespace purser::http {

Result<void> Router::add(Method method, std::string pattern, SyncHandler handler) {
  return addRoute(method, std::move(pattern), std::move(handler));
}

Result<void> Router::addAsync(Method method, std::string pattern, AsyncHandler handler) {
  return addRoute(method, std::move(pattern), std::move(handler));
}

Result<void> Router::addRoute(Method method, std::string pattern,
                              std::variant<SyncHandler, AsyncHandler> handler) {
  if (pattern.empty() || pattern[0] != '/') {
    return fail(invalidArgument(fmt::format("route pattern \"{}\" must start with '/'", pattern)));
  }
  Pattern parsed;
  bool dynamic = false;
  std::string_view rest = std::string_view(pattern).substr(1);
  while (true) {
    const size_t slash = rest.find('/');
    const std::string_view seg = rest.substr(0, slash);
    if (!parsed.segments.empty() && parsed.segments.back().kind == Segment::kCatchAll) {
      return fail(invalidArgument(
          fmt::format("route pattern \"{}\": a catch-all must be the last segment", pattern)));
    }
    if (seg.size() >= 2 && seg.front() == '{' && seg.back() == '}') {
      parsed.segments.push_back({Segment::kParam, std::string(seg.substr(1, seg.size() - 2))});
      dynamic = true;
    } else if (!seg.empty() && seg.front() == '*') {
      parsed.segments.push_back({Segment::kCatchAll, std::string(seg.substr(1))});
      dynamic = true;
    } else if (seg.find_first_of("{}*") != std::string_view::npos) {
      return fail(invalidArgument(
          fmt::format("route pattern \"{}\": malformed segment \"{}\"", pattern, seg)));
    } else {
      parsed.segments.push_back({Segment::kLiteral, std::string(seg)});
      ++parsed.literals;
    }
    if (slash == std::string_view::npos) break;
    rest = rest.substr(slash + 1);
  }

  Pattern* target = nullptr;
  if (!dynamic) {
    target = &exact_.try_emplace(pattern, std::move(parsed)).first->second;
  } else {
    for (auto& p : patterns_) {
      const bool same =
          p->segments.size() == parsed.segments.size() &&
          std::equal(p->segments.begin(), p->segments.end(), parsed.segments.begin(),
                     [](const Segment& a, const Segment& b) {
                       return a.kind == b.kind && (a.kind != Segment::kLiteral || a.text == b.text);
                     });
      if (same) target = p.get();
    }
    if (target == nullptr) {
      patterns_.push_back(std::make_unique<Pattern>(std::move(parsed)));
      target = patterns_.back().get();
      // Most literal segments first; then longer patterns; catch-alls last.
      std::stable_sort(patterns_.begin(), patterns_.end(), [](const auto& a, const auto& b) {
        const bool a_all = a->segments.back().kind == Segment::kCatchAll;
        const bool b_all = b->segments.back().kind == Segment::kCatchAll;
        if (a_all != b_all) return b_all;
        if (a->literals != b->literals) return a->literals > b->literals;
        return a->segments.size() > b->segments.size();
      });
    }
  }
  if (findMethod(*target, method) != nullptr) {
    return fail(Error(ErrorCode::kAlreadyExists, fmt::format("route {} {} is already registered",
                                                             methodName(method), pattern)));
  }
  target->by_method.push_back(
      std::make_unique<Route>(Route{method, std::move(pattern), std::move(handler), nullptr}));
  return {};
}

Route* Router::findMethod(const Pattern& p, Method method) {
  for (const auto& r : p.by_method) {
    if (r->method == method) return r.get();
  }
  return nullptr;
}

bool Router::matches(const Pattern& p, std::string_view path,
                     std::vector<std::pair<std::string, std::string>>* params) {
  if (path.empty() || path[0] != '/') return false;
  std::string_view rest = path.substr(1);
  for (size_t i = 0; i < p.segments.size(); ++i) {
    const Segment& seg = p.segments[i];
    if (seg.kind == Segment::kCatchAll) {
      if (params != nullptr) params->emplace_back(seg.text, std::string(rest));
      return true;
    }
    const size_t slash = rest.find('/');
    const std::string_view part = rest.substr(0, slash);
    const bool last = i + 1 == p.segments.size();
    if (last != (slash == std::string_view::npos)) return false;
    if (seg.kind == Segment::kLiteral) {
      if (part != seg.text) return false;
    } else {
      if (part.empty()) return false;
      if (params != nullptr) {
        auto decoded = percentDecode(part, false);
        if (!decoded) return false;
        params->emplace_back(seg.text, std::move(*decoded));
      }
    }
    if (!last) rest = rest.substr(slash + 1);
  }
  return true;
}

Router::Match Router::match(Request& request) const {
  const std::string_view path = request.path();
  Match m;
  // Returns true when `p` has a handler for the request's method (HEAD falls back to GET);
  // otherwise adds p's methods to the Allow list.
  const auto consider = [&](const Pattern& p) {
    Route* r = findMethod(p, request.method);
    if (r == nullptr && request.method == Method::kHead) r = findMethod(p, Method::kGet);
    if (r != nullptr) {
      request.params.clear();
      // Only patterns with parameters have anything to extract.
      if (static_cast<size_t>(p.literals) != p.segments.size()) matches(p, path, &request.params);
      m.route = r;
      m.allow.clear();
      return true;
    }
    for (const auto& other : p.by_method) {
      const std::string_view name = methodName(other->method);
      if (m.allow.find(name) == std::string::npos) {
        if (!m.allow.empty()) m.allow += ", ";
        m.allow += name;
      }
    }
    return false;
  };
  if (auto it = exact_.find(path); it != exact_.end() && consider(it->second)) return m;
  for (const auto& p : patterns_) {
    if (matches(*p, path, nullptr) && consider(*p)) return m;
  }
  return m;
}

std::vector<Route*> Router::routes() {
  std::vector<Route*> out;
  for (auto& [_, p] : exact_) {
    for (auto& r : p.by_method) out.push_back(r.get());
  }
  for (auto& p : patterns_) {
    for (auto& r : p->by_method) out.push_back(r.get());
  }
  return out;
}

}  // namespace purser::http
