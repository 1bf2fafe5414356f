// Logging set-up. Components log through spdlog's default logger (spdlog::info(...)) or a named
// one from logger("http"); this file decides where lines go and how they look.
//
// Two formats: human-readable text (default) and JSON lines, one object per line with the fields
// ts, level, logger and msg, for log shippers. Set-up is done once at start-up, before threads run.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string>
#include <string_view>

#include "common/result.h"

namespace purser {

enum class LogFormat { kText, kJson };

struct LogOptions {
  std::string level = "info";  // trace, debug, info, warn, error, critical, off
  LogFormat format = LogFormat::kText;
};

Result<spdlog::level::level_enum> parseLogLevel(std::string_view name);
Result<LogFormat> parseLogFormat(std::string_view name);

// Sends all loggers to stderr with the given level and format.
Result<void> setupLogging(const LogOptions& options);

// A named logger sharing the default sink and level ("http", "store", ...).
std::shared_ptr<spdlog::logger> logger(const std::string& name);

// Escapes a string for inclusion inside a JSON string literal; invalid UTF-8 becomes U+FFFD.
std::string jsonEscape(std::string_view s);

}  // namespace purser
