// The answer as JSON (docs/incidents.md §3), and how an answer is scored against a
// judged case (§4): the first finding's cause and subject, and whether every evidence item
// names something that is really in the case.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "common/json.h"
#include "diagnose/case.h"
#include "diagnose/engine.h"

namespace purser::diagnose {

Json toJson(const Diagnosis& d);
Json toJson(const Evidence& e);

// The values behind a metric evidence item over its interval, for drawing: [[unix seconds,
// value], ...] at most `max_points` (evenly thinned). A gauge as it is, a counter (a name ending
// in _total, or cited without it) as its rate per second, a histogram (cited by its base name) as
// its mean per interval. Empty for logs, events and series not in the case.
Json evidencePoints(const Case& c, const Evidence& e, size_t max_points = 120);
// Adds "points" to every metric evidence item of an answer made by toJson(d) (live answers, for
// the console's charts; not part of the incident-case answer format).
void attachPoints(Json& answer, const Case& c, const Diagnosis& d);

struct Score {
  bool top1 = false;             // first finding's cause (and subject, unless none) as expected
  bool evidence_real = false;    // every evidence item of every finding is in the case
  bool evidence_enough = false;  // the first finding cites two items (or is `none`)
  bool false_alarm = false;      // a `none` case answered with something else
  std::string got;               // "cause subject-kind/name" of the first finding
  std::string expected;
  std::vector<std::string> problems;  // evidence items not found in the case, and why
};

// Scores `d` against the case's `expected` block; a case without one scores nothing true.
Score scoreAnswer(const Case& c, const Diagnosis& d);

// Whether one evidence item names a series, log line or event present in the case.
bool evidenceInCase(const Case& c, const Evidence& e, std::string* why = nullptr);

}  // namespace purser::diagnose
