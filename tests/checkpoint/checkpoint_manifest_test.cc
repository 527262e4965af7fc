// MANIFEST format, verification and the FileSystem seam (no LibTorch here).
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <string>

#include "base/hash.h"
#include "checkpoint/checkpoint_manifest.h"
#include "checkpoint/file_system.h"
#include "tests/checkpoint/file_system_fault.h"
#include "tests/test_support.h"

namespace cumulus::checkpoint {
namespace {

const char kAbcSha[] = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

using cumulus::testing::TempDir;

std::string reasonOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(CheckpointManifest, EncodesKnownHashesSortedWithTrailer) {
  const std::string text = encodeManifest({describeFile("b.pt", "abc"), describeFile("a.pb", "")});
  const std::string body =
      "cumulus-checkpoint-manifest 1\n"
      "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 0 a.pb\n" +
      std::string(kAbcSha) + " 3 b.pt\n";
  ASSERT_EQ(text.substr(0, body.size()), body);
  EXPECT_EQ(text.size(), body.size() + 4 + 64 + 1);
  const auto entries = parseManifest(text);
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[1].name, "b.pt");
  EXPECT_EQ(entries[1].size, 3u);
  EXPECT_EQ(entries[1].sha256, kAbcSha);
}

TEST(CheckpointManifest, RejectsEveryTornPrefixAndEveryFlippedByte) {
  const std::string text =
      encodeManifest({describeFile("model.pt", "abc"), describeFile("state.pb", "xyz")});
  for (size_t n = 0; n < text.size(); ++n) {
    EXPECT_THROW(parseManifest(text.substr(0, n)), InvalidCheckpoint) << "prefix of " << n;
  }
  for (size_t i = 0; i < text.size(); ++i) {
    std::string bad = text;
    bad[i] ^= 0x01;
    EXPECT_THROW(parseManifest(bad), InvalidCheckpoint) << "flipped byte " << i;
  }
  EXPECT_EQ(reasonOf([&] { parseManifest(text.substr(0, text.size() - 10)); }),
            "torn MANIFEST: no final line end");
}

TEST(CheckpointManifest, RejectsBadNamesAndOtherVersions) {
  EXPECT_THROW(encodeManifest({describeFile("../x", "")}), std::invalid_argument);
  EXPECT_THROW(encodeManifest({describeFile("MANIFEST", "")}), std::invalid_argument);
  EXPECT_THROW(encodeManifest({describeFile("a", ""), describeFile("a", "")}),
               std::invalid_argument);
  // A well-formed file of another format version: the trailer matches, the header does not.
  const std::string body = "cumulus-checkpoint-manifest 2\n";
  const std::string text = body + "end " + base::sha256Hex(body) + "\n";
  EXPECT_EQ(reasonOf([&] { parseManifest(text); }),
            "MANIFEST line 1: \"cumulus-checkpoint-manifest 2\", expected "
            "\"cumulus-checkpoint-manifest 1\" (another format version?)");
  EXPECT_THROW(parseManifest(text), InvalidCheckpoint);
}

class CheckpointVerify : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.path();
    fs_.writeFile(dir_ + "/model.pt", "model-bytes");
    fs_.writeFile(dir_ + "/state.pb", "state");
    fs_.writeFile(dir_ + "/MANIFEST", encodeManifest({describeFile("model.pt", "model-bytes"),
                                                      describeFile("state.pb", "state")}));
  }
  std::string verifyReason() {
    return reasonOf([&] { verifyCheckpoint(fs_, dir_, {"model.pt", "state.pb"}); });
  }
  TempDir tmp_;
  std::string dir_;
  PosixFileSystem fs_;
};

TEST_F(CheckpointVerify, ReturnsTheVerifiedBytes) {
  const VerifiedCheckpoint v = verifyCheckpoint(fs_, dir_, {"model.pt"});
  EXPECT_EQ(v.files.at("model.pt"), "model-bytes");
  EXPECT_EQ(v.files.at("state.pb"), "state");
  EXPECT_TRUE(v.unlisted.empty());
}

TEST_F(CheckpointVerify, NamesEachKindOfDamage) {
  fs_.writeFile(dir_ + "/model.pt", "model-byt");
  EXPECT_EQ(verifyReason(), "model.pt: size 9 bytes, MANIFEST says 11 (truncated)");
  fs_.writeFile(dir_ + "/model.pt", "model-bytez");
  EXPECT_EQ(verifyReason(), "model.pt: SHA-256 mismatch (corrupt: content changed after the save)");
  fs_.writeFile(dir_ + "/model.pt", "model-bytes");
  fs_.removeAll(dir_ + "/state.pb");
  EXPECT_EQ(verifyReason(), "state.pb listed in MANIFEST but missing");
  fs_.writeFile(dir_ + "/MANIFEST", encodeManifest({describeFile("model.pt", "model-bytes")}));
  EXPECT_EQ(verifyReason(), "MANIFEST does not list state.pb");
  fs_.removeAll(dir_ + "/MANIFEST");
  EXPECT_EQ(verifyReason(), "missing MANIFEST (an incomplete or interrupted save)");
}

TEST_F(CheckpointVerify, AcceptsButReportsUnlistedFiles) {
  fs_.writeFile(dir_ + "/notes.txt", "hello");
  const VerifiedCheckpoint v = verifyCheckpoint(fs_, dir_, {"model.pt", "state.pb"});
  ASSERT_EQ(v.unlisted.size(), 1u);
  EXPECT_EQ(v.unlisted[0], "notes.txt");
  EXPECT_EQ(v.files.count("notes.txt"), 0u);
}

TEST(CheckpointFileSystem, ErrorsNamePathOperationAndErrnoText) {
  TempDir tmp;
  PosixFileSystem fs;
  const std::string missing = tmp.path() + "/no/such/file";
  EXPECT_EQ(reasonOf([&] { fs.writeFile(missing, "x"); }),
            missing + ": open for writing: No such file or directory");
  EXPECT_EQ(reasonOf([&] { fs.readFile(missing); }),
            missing + ": open for reading: No such file or directory");
  fs.createDir(tmp.path() + "/d");
  EXPECT_EQ(reasonOf([&] { fs.createDir(tmp.path() + "/d"); }),
            tmp.path() + "/d: mkdir: File exists");
  fs.removeAll(tmp.path() + "/nothing-here");  // not an error
}

TEST(CheckpointFileSystem, ExchangeSwapsDirectories) {
  TempDir tmp;
  PosixFileSystem fs;
  fs.createDir(tmp.path() + "/a");
  fs.createDir(tmp.path() + "/b");
  fs.writeFile(tmp.path() + "/a/f", "in a");
  try {
    fs.exchange(tmp.path() + "/a", tmp.path() + "/b");
  } catch (const FileSystemError& e) {
    GTEST_SKIP() << "renameat2 RENAME_EXCHANGE unsupported here: " << e.what();
  }
  EXPECT_EQ(fs.readFile(tmp.path() + "/b/f"), "in a");
  EXPECT_FALSE(fs.exists(tmp.path() + "/a/f"));
}

TEST(CheckpointFileSystem, FaultsLeaveAPrefixAndFailFsync) {
  TempDir tmp;
  PosixFileSystem posix;
  FaultInjectingFileSystem fs(posix);
  fs.writeFile(tmp.path() + "/one", "0123456789");
  fs.failWritesAfter(4);
  const std::string two = tmp.path() + "/two";
  EXPECT_EQ(reasonOf([&] { fs.writeFile(two, "abcdefgh"); }),
            two + ": write: No space left on device");
  EXPECT_EQ(posix.readFile(two), "abcd");
  EXPECT_EQ(fs.bytesWritten(), 14u);
  EXPECT_THROW(fs.writeFile(tmp.path() + "/three", "x"), FileSystemError);  // still full
  fs.clear();
  fs.failSyncOf("/four");
  EXPECT_EQ(reasonOf([&] { fs.writeFile(tmp.path() + "/four", "x"); }),
            tmp.path() + "/four: fsync: Input/output error");
  EXPECT_EQ(reasonOf([&] { fs.syncDir(tmp.path() + "/four"); }),
            tmp.path() + "/four: fsync directory: Input/output error");
  fs.writeFile(tmp.path() + "/five", "ok");
}

}  // namespace
}  // namespace cumulus::checkpoint
