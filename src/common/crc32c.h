// CRC-32C (Castagnoli), the checksum of the ledger's journal records: the polynomial storage
// formats use because CPUs compute it in hardware (SSE 4.2's crc32 instruction, ARMv8's CRC
// extension). Detects torn and corrupted records; not a defence against an adversary.
#pragma once

#include <cstdint>
#include <string_view>

namespace purser {

// The CRC-32C of `data`, continuing from `crc` (0 to start).
uint32_t crc32c(std::string_view data, uint32_t crc = 0);
// The same without the hardware instruction (what crc32c() falls back to; for tests).
uint32_t crc32cPortable(std::string_view data, uint32_t crc = 0);

}  // namespace purser
