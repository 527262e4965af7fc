#include "base/crc32c.h"

#include <array>

namespace cumulus::base {
namespace {

constexpr uint32_t kCastagnoliReflected = 0x82F63B78u;
constexpr uint32_t kTfRecordMaskDelta = 0xa282ead8u;

// table[b]: the CRC register after shifting byte b through it, eight bits at a time.
constexpr std::array<uint32_t, 256> makeTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t r = b;
    for (int bit = 0; bit < 8; ++bit) r = (r & 1u) ? (r >> 1) ^ kCastagnoliReflected : r >> 1;
    table[b] = r;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kTable = makeTable();

}  // namespace

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t r = ~crc;  // the register starts (and ends) inverted
  for (size_t i = 0; i < size; ++i) r = kTable[(r ^ p[i]) & 0xFFu] ^ (r >> 8);
  return ~r;
}

uint32_t maskedCrc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + kTfRecordMaskDelta;
}

}  // namespace cumulus::base
