// The frame header of the data plane (comm/net/frame.h): its byte layout and round trip.
#include <gtest/gtest.h>

#include "comm/net/frame.h"

namespace cumulus::comm::net {
namespace {

TEST(Frame, HeaderIsLittleEndianAndRoundTrips) {
  FrameHeader h;
  h.tag = 0x01020304;
  h.generation = 0x1112131415161718ull;
  h.sequence = 0x2122232425262728ull;
  h.length = 0x3132333435363738ull;
  uint8_t bytes[kFrameHeaderBytes];
  encodeFrameHeader(h, bytes);
  const uint8_t want[kFrameHeaderBytes] = {'C',  'M',  'L',  'F',  0x04, 0x03, 0x02, 0x01,
                                           0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,
                                           0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21,
                                           0x38, 0x37, 0x36, 0x35, 0x34, 0x33, 0x32, 0x31};
  for (size_t i = 0; i < kFrameHeaderBytes; ++i) ASSERT_EQ(bytes[i], want[i]) << "byte " << i;
  FrameHeader back = decodeFrameHeader(bytes);
  EXPECT_EQ(back.magic, kFrameMagic);
  EXPECT_EQ(back.tag, h.tag);
  EXPECT_EQ(back.generation, h.generation);
  EXPECT_EQ(back.sequence, h.sequence);
  EXPECT_EQ(back.length, h.length);
}

}  // namespace
}  // namespace cumulus::comm::net
