#include "data/dataset.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace cumulus::data {
namespace {

using Bytes = std::vector<uint8_t>;

Bytes idxBytes(uint8_t dtype, const std::vector<uint32_t>& dims, const Bytes& payload) {
  Bytes b = {0, 0, dtype, static_cast<uint8_t>(dims.size())};
  for (const uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) b.push_back(static_cast<uint8_t>(d >> shift));
  }
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

Bytes iota(size_t n, uint8_t start = 0) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(start + i);
  return b;
}

Bytes gzipBytes(const Bytes& raw) {
  uLongf size = compressBound(raw.size()) + 32;
  Bytes out(size);
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  zs.next_in = const_cast<Bytef*>(raw.data());
  zs.avail_in = static_cast<uInt>(raw.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

class IdxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cumulus-idx-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(const std::string& name, const Bytes& bytes) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
    return path;
  }

  // The DataError text readIdx throws for these bytes, or "(no exception)".
  std::string errorFor(const Bytes& bytes, const std::string& name = "f.idx") {
    const std::string path = write(name, bytes);
    try {
      readIdx(path);
    } catch (const DataError& e) {
      return e.what();
    }
    return "(no exception)";
  }

  std::string dir_;
};

TEST_F(IdxTest, ReadsRaw) {
  const torch::Tensor t = readIdx(write("a-idx3-ubyte", idxBytes(0x08, {3, 2, 2}, iota(12))));
  EXPECT_EQ(t.scalar_type(), torch::kUInt8);
  EXPECT_EQ(t.sizes(), torch::IntArrayRef({3, 2, 2}));
  EXPECT_EQ(t[2][1][0].item<int>(), 10);
  EXPECT_EQ(t.sum().item<int64_t>(), 66);
}

TEST_F(IdxTest, ReadsGzipByMagicWhateverTheName) {
  const Bytes raw = idxBytes(0x08, {70000}, iota(70000, 3));
  for (const std::string name : {"b-idx1-ubyte.gz", "no-suffix"}) {
    const torch::Tensor t = readIdx(write(name, gzipBytes(raw)));
    ASSERT_EQ(t.sizes(), torch::IntArrayRef({70000})) << name;
    EXPECT_EQ(t[0].item<int>(), 3);
    EXPECT_EQ(t[69999].item<int>(), static_cast<uint8_t>(3 + 69999));
  }
}

TEST_F(IdxTest, ReadsRawUnderAGzName) {
  const torch::Tensor t = readIdx(write("c-idx1-ubyte.gz", idxBytes(0x08, {3}, {7, 8, 9})));
  EXPECT_EQ(t.sum().item<int64_t>(), 24);
}

TEST_F(IdxTest, ReadsConcatenatedGzipMembers) {
  const Bytes raw = idxBytes(0x08, {4, 5}, iota(20));
  Bytes cat = gzipBytes(Bytes(raw.begin(), raw.begin() + 10));
  const Bytes tail = gzipBytes(Bytes(raw.begin() + 10, raw.end()));
  cat.insert(cat.end(), tail.begin(), tail.end());
  const torch::Tensor t = readIdx(write("cat.gz", cat));
  EXPECT_EQ(t.sizes(), torch::IntArrayRef({4, 5}));
  EXPECT_EQ(t.sum().item<int64_t>(), 190);
}

TEST_F(IdxTest, MissingFile) {
  const std::string path = dir_ + "/absent-idx3-ubyte";
  try {
    readIdx(path);
    FAIL() << "no exception";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()), path + ": not found");
  }
  try {
    readIdx(dir_);
    FAIL() << "no exception";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()), dir_ + ": is a directory, not a regular file");
  }
}

// No writer ever opens the FIFO: a blocking open would hang the test.
TEST_F(IdxTest, AFifoIsRefusedAtOnce) {
  const std::string path = dir_ + "/fifo-idx3-ubyte";
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  try {
    readIdx(path);
    FAIL() << "no exception";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()), path + ": is a FIFO, not a regular file");
  }
}

TEST_F(IdxTest, TruncatedPayload) {
  EXPECT_EQ(errorFor(idxBytes(0x08, {3, 28, 28}, iota(1000))),
            dir_ + "/f.idx: truncated IDX file: dimensions 3x28x28 need 2368 bytes, got 1016");
  EXPECT_EQ(errorFor(gzipBytes(idxBytes(0x08, {3, 28, 28}, iota(1000))), "f.gz"),
            dir_ +
                "/f.gz: truncated IDX file: dimensions 3x28x28 need 2368 bytes, got 1016 "
                "(decompressed)");
}

TEST_F(IdxTest, TruncatedHeader) {
  EXPECT_EQ(errorFor({0, 0, 8}), dir_ + "/f.idx: too short for an IDX header: 3 bytes");
  EXPECT_EQ(errorFor({0, 0, 8, 3, 0, 0, 0, 1}),
            dir_ + "/f.idx: truncated IDX header: 3 dimensions need 16 bytes, got 8");
}

TEST_F(IdxTest, TruncatedGzipStream) {
  Bytes gz = gzipBytes(idxBytes(0x08, {5000}, iota(5000)));
  gz.resize(gz.size() / 2);
  const std::string error = errorFor(gz, "f.gz");
  EXPECT_EQ(error.rfind(dir_ + "/f.gz: truncated gzip stream (input ended after ", 0), 0u) << error;
}

TEST_F(IdxTest, CorruptGzip) {
  Bytes gz = gzipBytes(idxBytes(0x08, {5000}, iota(5000)));
  gz[3] = 0xE0;  // reserved FLG bits set: zlib rejects the header
  EXPECT_EQ(errorFor(gz, "f.gz"), dir_ + "/f.gz: corrupt gzip data: unknown header flags set");
  Bytes bad_crc = gzipBytes(idxBytes(0x08, {5000}, iota(5000)));
  bad_crc[bad_crc.size() - 8] ^= 0xFF;  // the CRC-32 in the trailer
  EXPECT_EQ(errorFor(bad_crc, "c.gz"), dir_ + "/c.gz: corrupt gzip data: incorrect data check");
  // A trailer announcing 4 GiB: the buffer reserved for it is capped and never touched.
  Bytes bad_length = gzipBytes(idxBytes(0x08, {5000}, iota(5000)));
  for (size_t i = bad_length.size() - 4; i < bad_length.size(); ++i) bad_length[i] = 0xFF;
  EXPECT_EQ(errorFor(bad_length, "l.gz"),
            dir_ + "/l.gz: corrupt gzip data: incorrect length check");
  Bytes garbage = gzipBytes(idxBytes(0x08, {4}, iota(4)));
  garbage.insert(garbage.end(), {1, 2, 3});
  EXPECT_EQ(errorFor(garbage, "g.gz"),
            dir_ + "/g.gz: 3 bytes of trailing garbage after the gzip stream");
}

TEST_F(IdxTest, CorruptMagic) {
  EXPECT_EQ(errorFor({0x01, 0x02, 0x08, 0x01, 0, 0, 0, 1, 7}),
            dir_ +
                "/f.idx: not an IDX file: magic bytes 0x01 0x02 0x08 0x01, expected 0x00 0x00 "
                "<dtype> <ndim>");
}

TEST_F(IdxTest, WrongDtype) {
  EXPECT_EQ(errorFor(idxBytes(0x0D, {1}, {0, 0, 128, 63})),
            dir_ + "/f.idx: unsupported IDX dtype 0x0d (float32); only 0x08 (uint8) is supported");
  EXPECT_EQ(errorFor(idxBytes(0x42, {1}, {0})),
            dir_ + "/f.idx: unsupported IDX dtype 0x42 (unknown); only 0x08 (uint8) is supported");
}

TEST_F(IdxTest, BadDimensions) {
  EXPECT_EQ(errorFor(idxBytes(0x08, {}, {})),
            dir_ + "/f.idx: IDX header has 0 dimensions; expected 1 to 4");
  EXPECT_EQ(errorFor(idxBytes(0x08, {1, 1, 1, 1, 1}, {9})),
            dir_ + "/f.idx: IDX header has 5 dimensions; expected 1 to 4");
  EXPECT_EQ(errorFor(idxBytes(0x08, {2, 0, 2}, {})), dir_ + "/f.idx: IDX dimension 1 is zero");
}

// A header that claims far more data than the file holds must fail before allocating it.
TEST_F(IdxTest, LyingDimensions) {
  EXPECT_EQ(errorFor(idxBytes(0x08, {0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}, iota(4))),
            dir_ +
                "/f.idx: IDX dimensions 4294967295x4294967295x4294967295x4294967295 are too "
                "large: the file has only 24 bytes");
  EXPECT_EQ(
      errorFor(idxBytes(0x08, {60000, 28, 28}, iota(10))),
      dir_ + "/f.idx: truncated IDX file: dimensions 60000x28x28 need 47040016 bytes, got 26");
}

TEST_F(IdxTest, TrailingBytes) {
  EXPECT_EQ(errorFor(idxBytes(0x08, {2, 2}, iota(9))),
            dir_ +
                "/f.idx: 5 trailing bytes after the IDX data: dimensions 2x2 need 16 bytes, "
                "got 21");
}

// The decompressed cache: a read with a cache directory leaves an entry there, later reads use it
// while the source is unchanged, and a stale or damaged entry is ignored and rewritten.
class IdxCacheTest : public IdxTest {
 protected:
  std::string cacheDir() const { return dir_ + "/cache/nested"; }
  // The one cache entry for `name`.
  std::string entry(const std::string& name) const {
    for (const auto& e : std::filesystem::directory_iterator(cacheDir())) {
      if (e.path().filename().string().rfind(name + ".", 0) == 0) return e.path().string();
    }
    return "";
  }
};

TEST_F(IdxCacheTest, SecondReadComesFromTheCache) {
  const Bytes raw = idxBytes(0x08, {50, 10}, iota(500, 3));
  const std::string path = write("d-idx2-ubyte.gz", gzipBytes(raw));
  const torch::Tensor first = readIdx(path, cacheDir());
  const std::string cached = entry("d-idx2-ubyte");
  ASSERT_FALSE(cached.empty()) << "no cache entry in " << cacheDir();
  EXPECT_EQ(std::filesystem::file_size(cached), 64 + raw.size());  // header + the IDX bytes
  const torch::Tensor second = readIdx(path, cacheDir());
  EXPECT_TRUE(torch::equal(first, second));
  EXPECT_EQ(second.sum().item<int64_t>(),
            torch::tensor(std::vector<int64_t>(raw.begin() + 12, raw.end())).sum().item<int64_t>());
}

TEST_F(IdxCacheTest, EntryIsUsedWithoutInflating) {
  // An entry written for a source is used as long as the source keeps its identity: replace the
  // cached IDX bytes with other valid ones (and fix the CRC) and readIdx returns those.
  const std::string path = write("e-idx1-ubyte.gz", gzipBytes(idxBytes(0x08, {4}, {1, 2, 3, 4})));
  readIdx(path, cacheDir());
  const std::string cached = entry("e-idx1-ubyte");
  ASSERT_FALSE(cached.empty());
  std::fstream f(cached, std::ios::in | std::ios::out | std::ios::binary);
  const Bytes other = idxBytes(0x08, {4}, {9, 9, 9, 9});
  f.seekp(64);
  f.write(reinterpret_cast<const char*>(other.data()), static_cast<std::streamsize>(other.size()));
  const uint32_t crc =
      static_cast<uint32_t>(crc32(0, other.data(), static_cast<uInt>(other.size())));
  f.seekp(56);  // the CRC field of the header
  f.write(reinterpret_cast<const char*>(&crc), sizeof crc);
  f.close();
  EXPECT_EQ(readIdx(path, cacheDir()).sum().item<int64_t>(), 36);
}

TEST_F(IdxCacheTest, DamagedOrStaleEntryIsIgnoredAndRewritten) {
  const Bytes raw = idxBytes(0x08, {1000}, iota(1000));
  const std::string path = write("f-idx1-ubyte.gz", gzipBytes(raw));
  const int64_t want = readIdx(path).sum().item<int64_t>();
  readIdx(path, cacheDir());
  const std::string cached = entry("f-idx1-ubyte");
  ASSERT_FALSE(cached.empty());
  // One flipped payload byte: the CRC catches it.
  {
    std::fstream f(cached, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(64 + 500);
    f.put('\x7f');
  }
  EXPECT_EQ(readIdx(path, cacheDir()).sum().item<int64_t>(), want);
  // Truncated entry.
  std::filesystem::resize_file(entry("f-idx1-ubyte"), 100);
  EXPECT_EQ(readIdx(path, cacheDir()).sum().item<int64_t>(), want);
  EXPECT_EQ(std::filesystem::file_size(entry("f-idx1-ubyte")), 64 + raw.size());  // rewritten
  // A new source under the same name (other size and time): the old entry is stale.
  const Bytes raw2 = idxBytes(0x08, {1001}, iota(1001, 7));
  write("f-idx1-ubyte.gz", gzipBytes(raw2));
  const int64_t want2 = readIdx(path).sum().item<int64_t>();
  EXPECT_NE(want2, want);
  EXPECT_EQ(readIdx(path, cacheDir()).sum().item<int64_t>(), want2);
}

TEST_F(IdxCacheTest, UnwritableCacheIsSkipped) {
  const std::string path = write("g-idx1-ubyte.gz", gzipBytes(idxBytes(0x08, {3}, {1, 2, 3})));
  write("blocker", {1});  // a file where the cache directory would go
  EXPECT_EQ(readIdx(path, dir_ + "/blocker/cache").sum().item<int64_t>(), 6);
}

TEST_F(IdxCacheTest, CorruptSourceIsNeverCached) {
  Bytes gz = gzipBytes(idxBytes(0x08, {5000}, iota(5000)));
  gz[gz.size() - 5] ^= 1;  // the gzip CRC
  const std::string path = write("h-idx1-ubyte.gz", gz);
  EXPECT_THROW(readIdx(path, cacheDir()), DataError);
  EXPECT_THROW(readIdx(path, cacheDir()), DataError);
  EXPECT_TRUE(!std::filesystem::exists(cacheDir()) || entry("h-idx1-ubyte").empty());
}

// MNIST-layout directories built from small files.
class MnistLikeTest : public IdxTest {
 protected:
  void writeSplit(const std::string& prefix, uint32_t n, const Bytes& labels, bool gz) {
    const Bytes images = idxBytes(0x08, {n, 2, 3}, iota(n * 6, 250));
    const Bytes label_file = idxBytes(0x08, {static_cast<uint32_t>(labels.size())}, labels);
    write(prefix + "-images-idx3-ubyte" + (gz ? ".gz" : ""), gz ? gzipBytes(images) : images);
    write(prefix + "-labels-idx1-ubyte" + (gz ? ".gz" : ""),
          gz ? gzipBytes(label_file) : label_file);
  }
  std::string loadError(Split split) {
    try {
      loadMnistLike(dir_, split);
    } catch (const DataError& e) {
      return e.what();
    }
    return "(no exception)";
  }
};

TEST_F(MnistLikeTest, LoadsScaledFloatsAndInt64Labels) {
  writeSplit("train", 2, {3, 9}, true);
  writeSplit("t10k", 1, {0}, false);
  const TensorDataset train = loadMnistLike(dir_, Split::kTrain);
  EXPECT_EQ(train.size(), 2);
  EXPECT_EQ(train.inputs.sizes(), torch::IntArrayRef({2, 1, 2, 3}));
  EXPECT_EQ(train.inputs.scalar_type(), torch::kFloat32);
  EXPECT_EQ(train.targets.scalar_type(), torch::kInt64);
  EXPECT_FLOAT_EQ(train.inputs[0][0][0][0].item<float>(), 250.0f / 255.0f);
  EXPECT_FLOAT_EQ(train.inputs[0][0][1][2].item<float>(), 1.0f);  // byte 255
  EXPECT_FLOAT_EQ(train.inputs[1][0][0][0].item<float>(), 0.0f);  // byte 256 wrapped to 0
  EXPECT_FLOAT_EQ(train.inputs[1][0][1][2].item<float>(), 5.0f / 255.0f);
  EXPECT_EQ(train.targets[1].item<int64_t>(), 9);
  EXPECT_EQ(loadMnistLike(dir_, Split::kTest).size(), 1);
}

TEST_F(MnistLikeTest, MissingDirectorySaysWhatToDo) {
  EXPECT_EQ(loadError(Split::kTest),
            dir_ +
                "/t10k-images-idx3-ubyte[.gz]: not found; install the dataset-fashion-mnist "
                "package (files in /usr/share/datasets/fashion-mnist) or set data.dir to a "
                "directory holding MNIST-layout IDX files");
}

TEST_F(MnistLikeTest, CountsMustAgree) {
  writeSplit("train", 3, {1, 2}, false);
  EXPECT_EQ(loadError(Split::kTrain), dir_ + "/train-labels-idx1-ubyte: has 2 labels but " + dir_ +
                                          "/train-images-idx3-ubyte has 3 images");
}

TEST_F(MnistLikeTest, LabelsMustBeBelowTen) {
  writeSplit("train", 2, {1, 10}, false);
  EXPECT_EQ(loadError(Split::kTrain),
            dir_ + "/train-labels-idx1-ubyte: label 10 is out of range 0..9");
}

TEST_F(MnistLikeTest, ImagesMustBeThreeDimensional) {
  writeSplit("train", 2, {1, 2}, false);
  write("train-images-idx3-ubyte", idxBytes(0x08, {2, 6}, iota(12)));
  EXPECT_EQ(loadError(Split::kTrain),
            dir_ + "/train-images-idx3-ubyte: expected 3 dimensions (count, rows, columns), got 2");
}

}  // namespace
}  // namespace cumulus::data
