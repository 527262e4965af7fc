// SHA-256 against the FIPS 180-4 / NIST example vectors, HMAC-SHA-256 against RFC 4231, and
// the nonce source.
#include "base/hash.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace cumulus::base {
namespace {

// SHA-256 of the 5137 bytes the loop in EveryLengthMatchesPiecewiseHashing makes, by Python
// hashlib.
constexpr char kLongDataSha256[] =
    "fa509c8ff77bcf9b38ed5a229cd0f574a7c5dc86a56afba1ae617a9307b776fa";

TEST(Sha256Test, KnownVectors) {
  EXPECT_EQ(sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(
      sha256Hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopq"
                "klmnopqrlmnopqrsmnopqrstnopqrstu"),
      "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, PaddingBoundaries) {
  // 55, 56 and 64 bytes straddle the one-or-two-block padding cases.
  EXPECT_EQ(sha256Hex(std::string(55, 'a')),
            "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(sha256Hex(std::string(56, 'a')),
            "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  EXPECT_EQ(sha256Hex(std::string(64, 'a')),
            "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

TEST(Sha256Test, IncrementalEqualsOneShot) {
  std::string data;
  for (int i = 0; i < 300; ++i) data.push_back(static_cast<char>(i * 7 + 3));
  const std::string expected = sha256Hex(data);
  for (size_t split = 0; split <= data.size(); ++split) {
    Sha256 hasher;
    hasher.update(std::string_view(data).substr(0, split));
    hasher.update(std::string_view(data).substr(split));
    ASSERT_EQ(toHex(hasher.digest()), expected) << "split at " << split;
  }
  Sha256 bytewise;
  for (char c : data) bytewise.update(&c, 1);
  EXPECT_EQ(toHex(bytewise.digest()), expected);
}

// Every length from 0 to 1 KiB plus multi-block tails, in one call and in pieces: a bug in one
// code path's block schedule (blocks 2+ in one call) cannot hide behind short vectors. The
// expected digests come from Python's hashlib, another implementation.
TEST(Sha256Test, EveryLengthMatchesPiecewiseHashing) {
  std::string data;
  uint32_t x = 12345;
  for (int i = 0; i < 1024 + 4096 + 17; ++i) {
    x = x * 1103515245u + 12345u;
    data.push_back(static_cast<char>(x >> 24));
  }
  Sha256 all;
  all.update(data);
  EXPECT_EQ(toHex(all.digest()), kLongDataSha256);
  for (size_t n = 0; n <= data.size(); n += (n < 1024 ? 1 : 1031)) {
    const std::string_view piece = std::string_view(data).substr(0, n);
    Sha256 split;
    split.update(piece.substr(0, n / 3));
    split.update(piece.substr(n / 3));
    ASSERT_EQ(toHex(split.digest()), sha256Hex(piece)) << n << " bytes";
  }
}

TEST(Sha256Test, UpdateAfterDigestIsAnError) {
  Sha256 hasher;
  hasher.update("abc");
  hasher.digest();
  EXPECT_THROW(hasher.update("d"), std::logic_error);
  EXPECT_THROW(hasher.digest(), std::logic_error);
}

TEST(HmacTest, Rfc4231Vectors) {
  // RFC 4231 test case 2, and test case 6 (a key longer than the block is hashed first).
  EXPECT_EQ(toHex(hmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(toHex(hmacSha256(std::string(131, '\xaa'),
                             "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(HmacTest, DigestEqualComparesEveryByte) {
  EXPECT_TRUE(digestEqual(sha256("x"), sha256("x")));
  EXPECT_FALSE(digestEqual(sha256("x"), sha256("y")));
  Digest a = sha256("x");
  Digest b = a;
  b[31] ^= 1;
  EXPECT_FALSE(digestEqual(a, b));
  EXPECT_EQ(toHex(sha256("abc")), sha256Hex("abc"));
}

TEST(HmacTest, RandomBytesDiffer) {
  Digest a{};
  Digest b{};
  randomBytes(a.data(), a.size());
  randomBytes(b.data(), b.size());
  EXPECT_FALSE(digestEqual(a, b));  // fails falsely with probability 2^-256
}

}  // namespace
}  // namespace cumulus::base
