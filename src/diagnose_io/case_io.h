// Incident files (docs/incidents.md) to Case values and back: the one reader of the diagnosis's
// input, outside the engine, so that the analysis never parses (the engine is the same whether
// its case came from a file or from Purser's own records).
//
// The file is bytes from outside: every size is bounded by CaseLimits (diagnose/case.h), invalid
// UTF-8 and malformed YAML or metric lines are refused with the line that is wrong, and nothing in
// it can make the reader crash or take more than linear time. The `metrics` block is read line by
// line without the YAML parser.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"
#include "diagnose/case.h"

namespace purser::diagnose {

// Reads an incident case (see docs/incidents.md). Errors are kInvalidArgument with the
// file and line.
Result<Case> parseCase(std::string_view text, const std::string& file,
                       const CaseLimits& limits = {});

// A case as an incident file that parseCase() reads back to the same value (samples and times
// to the millisecond; `expected:` when the case carries it). Live diagnosis saves the case it
// answered with this, so that an answer can be replayed with `purser diagnose --case FILE` or
// attached to a report.
std::string writeCase(const Case& c);

}  // namespace purser::diagnose
