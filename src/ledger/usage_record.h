// The ledger journal's records (see journal.h): what the money path appends, in a compact binary
// form — varints and length-prefixed strings after a one-byte kind — so that appending costs no
// JSON and no SQL. Decoding checks every length against the record's end and names what is
// wrong; it never reads past the bytes it is given.
#pragma once

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/result.h"
#include "ledger/usage_event.h"

namespace purser::ledger {

// A reservation's write-ahead intent: the work may run.
struct IntentRecord {
  UsageEvent draft;  // who and what; tokens and cost unset
  std::vector<std::string> wallets;
  Money amount;
  int64_t at_ms = 0;
  int64_t expires_ms = 0;
  bool external = false;
  int64_t token_estimate = 0;
};

// A settled usage event and the wallets charged; removes its intent.
struct UsageRecord {
  UsageEvent event;
  std::vector<std::string> wallets;
};

// Reservations given back unsettled (released, or their lease ended); removes their intents.
struct ReleaseRecord {
  std::vector<std::string> ids;
};

using LedgerRecord = std::variant<IntentRecord, UsageRecord, ReleaseRecord>;

// Appends the encoding of `record` to `out`.
void encodeRecord(const LedgerRecord& record, std::string& out);
Result<LedgerRecord> decodeRecord(std::string_view bytes);

}  // namespace purser::ledger
