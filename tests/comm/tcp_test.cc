// Wire-level pieces of the TCP transport: the frame layout, SHA-256/HMAC against published test
// vectors, and host:port parsing.
#include <gtest/gtest.h>

#include "comm/tcp/frame.h"
#include "comm/tcp/sha256.h"
#include "comm/tcp/socket.h"

namespace cumulus::comm::tcp {
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

TEST(Sha256, PublishedVectors) {
  EXPECT_EQ(toHex(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(toHex(sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // Two blocks after padding.
  EXPECT_EQ(toHex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, HmacRfc4231) {
  // RFC 4231 test case 2, and test case 6 (a key longer than the block is hashed first).
  EXPECT_EQ(toHex(hmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(toHex(hmacSha256(std::string(131, '\xaa'),
                             "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  EXPECT_TRUE(digestEqual(sha256("x"), sha256("x")));
  EXPECT_FALSE(digestEqual(sha256("x"), sha256("y")));
}

TEST(Socket, SplitHostPort) {
  std::string host;
  int port = 0;
  ASSERT_TRUE(splitHostPort("127.0.0.1:29500", &host, &port));
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 29500);
  ASSERT_TRUE(splitHostPort("[::1]:80", &host, &port));
  EXPECT_EQ(host, "::1");
  EXPECT_FALSE(splitHostPort("nohost", &host, &port));
  EXPECT_FALSE(splitHostPort("h:0", &host, &port));
  EXPECT_FALSE(splitHostPort("h:99999", &host, &port));
  EXPECT_FALSE(splitHostPort("h:12x", &host, &port));
}

TEST(Socket, ListenPublishesANumericLoopbackAddress) {
  Socket listener = Socket::listen("127.0.0.1");
  std::string host;
  int port = 0;
  ASSERT_TRUE(splitHostPort(listener.localAddress(), &host, &port)) << listener.localAddress();
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_GT(port, 0);
  EXPECT_THROW(Socket::listen("no-such-host.invalid"), std::runtime_error);
}

}  // namespace
}  // namespace cumulus::comm::tcp
