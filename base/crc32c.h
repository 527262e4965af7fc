#pragma once
// CRC-32C (Castagnoli: reflected polynomial 0x82F63B78), the checksum of TFRecord framing, which
// TensorBoard's event files use (metrics/tensorboard.h). Portable table-driven code, one byte per
// step: no SSE4.2 instruction, so it runs on any x86-64 (and anything else). The records it
// checks are small and rare; speed does not matter here.
//
// Pure functions, thread-safe. crc32c("123456789") == 0xE3069283.

#include <cstddef>
#include <cstdint>

namespace cumulus::base {

// The CRC-32C of `size` bytes at `data`. Incremental: pass the result for the bytes before as
// `crc`, so crc32c(b, nb, crc32c(a, na)) equals the CRC of a followed by b. 0 starts afresh.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

// TFRecord's masked CRC-32C of the bytes: ((crc >> 15) | (crc << 17)) + 0xa282ead8, which keeps
// a CRC of data that itself holds CRCs from being trivially zero.
uint32_t maskedCrc32c(const void* data, size_t size);

}  // namespace cumulus::base
