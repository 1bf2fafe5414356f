// The console's files (web/), compiled into the binary so `purser serve` needs nothing beside
// it and works without internet access. Served at "/" and at each file's path, with an ETag so
// browsers revalidate cheaply.
#pragma once

#include <span>
#include <string_view>

#include "common/result.h"
#include "http/router.h"

namespace purser::server {

struct EmbeddedFile {
  const char* path;  // "/index.html"
  const char* data;
  size_t size;
};

// Generated at build time from web/.
std::span<const EmbeddedFile> embeddedConsoleFiles();

std::string_view contentTypeFor(std::string_view path);

Result<void> addConsoleRoutes(http::Router& router);

}  // namespace purser::server
