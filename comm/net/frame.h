#pragma once
// Wire formats of the TCP data plane. All integers are little-endian, whatever the host.
//
// Data frame (32 bytes, then `length` payload bytes):
//   u32 magic 'CMLF' | u32 tag | u64 generation | u64 sequence | u64 length
// `sequence` is the communicator's operation number and `tag` the message's index within that
// operation, so a receiver knows exactly which frame must come next: anything else (wrong magic,
// another generation, sequence or tag, a length other than expected) is a kBadFrame.
//
// A frame whose payload lies in a shared-memory slot (comm/shm/channel.h) has the same header with
// magic 'CMLS' and no payload bytes on the stream; `length` is still the payload's length.

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace cumulus::comm::net {

constexpr uint32_t kFrameMagic = 0x464c4d43;     // "CMLF" in memory order
constexpr uint32_t kShmFrameMagic = 0x534c4d43;  // "CMLS"
constexpr size_t kFrameHeaderBytes = 32;

struct FrameHeader {
  uint32_t magic = kFrameMagic;
  uint32_t tag = 0;
  uint64_t generation = 0;
  uint64_t sequence = 0;
  uint64_t length = 0;
};

inline void storeLe32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void storeLe64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint32_t loadLe32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
inline uint64_t loadLe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

inline void encodeFrameHeader(const FrameHeader& h, uint8_t out[kFrameHeaderBytes]) {
  storeLe32(out, h.magic);
  storeLe32(out + 4, h.tag);
  storeLe64(out + 8, h.generation);
  storeLe64(out + 16, h.sequence);
  storeLe64(out + 24, h.length);
}

inline FrameHeader decodeFrameHeader(const uint8_t in[kFrameHeaderBytes]) {
  FrameHeader h;
  h.magic = loadLe32(in);
  h.tag = loadLe32(in + 4);
  h.generation = loadLe64(in + 8);
  h.sequence = loadLe64(in + 16);
  h.length = loadLe64(in + 24);
  return h;
}

}  // namespace cumulus::comm::net
