#include "common/logging.h"

#include <fmt/format.h>
#include <spdlog/details/fmt_helper.h>
#include <spdlog/formatter.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <chrono>
#include <mutex>

#include "common/clock.h"
#include "common/json.h"

namespace purser {

std::string jsonEscape(std::string_view text) {
  // Invalid UTF-8 (a client's bytes in a message) is written as U+FFFD: the line stays JSON.
  const std::string valid = toValidUtf8(text);
  const std::string_view s = valid;
  std::string out;
  out.reserve(s.size() + 8);
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  return out;
}

namespace {

// One JSON object per line: {"ts":"...","level":"info","logger":"http","msg":"..."}.
class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const std::string line =
        fmt::format(R"({{"ts":"{}","level":"{}","logger":"{}","msg":"{}"}})"
                    "\n",
                    formatRfc3339(std::chrono::time_point_cast<SystemTime::duration>(msg.time)),
                    spdlog::level::to_string_view(msg.level).data(),
                    jsonEscape(std::string_view(msg.logger_name.data(), msg.logger_name.size())),
                    jsonEscape(std::string_view(msg.payload.data(), msg.payload.size())));
    dest.append(line.data(), line.data() + line.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }
};

std::mutex g_mu;
spdlog::sink_ptr g_sink;  // guarded by g_mu

}  // namespace

Result<spdlog::level::level_enum> parseLogLevel(std::string_view name) {
  static constexpr std::pair<std::string_view, spdlog::level::level_enum> kLevels[] = {
      {"trace", spdlog::level::trace}, {"debug", spdlog::level::debug},
      {"info", spdlog::level::info},   {"warn", spdlog::level::warn},
      {"error", spdlog::level::err},   {"critical", spdlog::level::critical},
      {"off", spdlog::level::off}};
  for (const auto& [n, l] : kLevels) {
    if (n == name) return l;
  }
  return fail(invalidArgument(fmt::format(
      "unknown log level \"{}\"; expected one of trace, debug, info, warn, error, critical, off",
      name)));
}

Result<LogFormat> parseLogFormat(std::string_view name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  return fail(
      invalidArgument(fmt::format("unknown log format \"{}\"; expected text or json", name)));
}

Result<void> setupLogging(const LogOptions& options) {
  const auto level = PURSER_TRY_VALUE(parseLogLevel(options.level));
  std::lock_guard lock(g_mu);
  g_sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  if (options.format == LogFormat::kJson) {
    g_sink->set_formatter(std::make_unique<JsonFormatter>());
  } else {
    g_sink->set_formatter(std::make_unique<spdlog::pattern_formatter>(
        "%Y-%m-%dT%H:%M:%S.%eZ %^%l%$ [%n] %v", spdlog::pattern_time_type::utc));
  }
  auto root = std::make_shared<spdlog::logger>("purser", g_sink);
  root->set_level(level);
  spdlog::set_default_logger(root);
  spdlog::set_level(level);
  spdlog::apply_all([&](const std::shared_ptr<spdlog::logger>& l) {
    l->sinks().assign(1, g_sink);
    l->set_level(level);
  });
  return {};
}

std::shared_ptr<spdlog::logger> logger(const std::string& name) {
  if (auto existing = spdlog::get(name)) return existing;
  std::lock_guard lock(g_mu);
  if (auto existing = spdlog::get(name)) return existing;
  auto sink = g_sink ? g_sink : spdlog::default_logger()->sinks().front();
  auto l = std::make_shared<spdlog::logger>(name, sink);
  l->set_level(spdlog::default_logger()->level());
  spdlog::register_logger(l);
  return l;
}

}  // namespace purser
