// data.format npy and data.format tokens: samples, windows, messages, files numpy itself wrote,
// and a sparse file far larger than what a test reads.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "data/npy.h"
#include "tests/data/npy_writer.h"
#include "tests/data/tensor_values.h"

namespace cumulus::data {
namespace {

using testing::npyBytes;
using testing::npyDict;
using testing::npyHeader;

using testing::values;

class NpyExamplesTest : public testing::NpyTempDir {
 protected:
  // inputs float64 [3, 2] = {{0, 0.5}, {1, 1.5}, {2, 2.5}}, targets int32 [rows] = 10, 11, ...
  std::string writeSet(const std::string& name, int64_t target_rows) {
    write(name + "/inputs.npy", npyBytes<double>("<f8", "(3, 2)", {0, 0.5, 1, 1.5, 2, 2.5}));
    std::vector<int32_t> targets;
    for (int32_t i = 0; i < target_rows; ++i) targets.push_back(10 + i);
    write(name + "/targets.npy",
          npyBytes<int32_t>("<i4", "(" + std::to_string(target_rows) + ",)", targets));
    return dir_ + "/" + name;
  }
};

TEST_F(NpyExamplesTest, GathersAndSlicesSamples) {
  const std::string dir = writeSet("train", 3);
  const auto examples = openNpyExamples(dir);
  EXPECT_EQ(examples->size(), 3);
  EXPECT_EQ(examples->describe(), dir +
                                      " (npy: inputs float32 [3, 2] (stored as float64), "
                                      "targets int64 [3] (stored as int32))");
  const Batch batch = examples->gather({2, 0, 2});
  EXPECT_EQ(batch.inputs.scalar_type(), torch::kFloat32);
  EXPECT_EQ(batch.inputs.sizes().vec(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(values<float>(batch.inputs), (std::vector<float>{2, 2.5, 0, 0.5, 2, 2.5}));
  EXPECT_EQ(batch.targets.scalar_type(), torch::kInt64);
  EXPECT_EQ(values<int64_t>(batch.targets), (std::vector<int64_t>{12, 10, 12}));
  const Batch run = examples->slice(1, 2);
  EXPECT_EQ(values<float>(run.inputs), (std::vector<float>{1, 1.5, 2, 2.5}));
  EXPECT_EQ(values<int64_t>(run.targets), (std::vector<int64_t>{11, 12}));
  EXPECT_EQ(examples->slice(3, 0).inputs.sizes().vec(), (std::vector<int64_t>{0, 2}));
  try {
    examples->gather({0, 3});
    FAIL() << "gathered sample 3 of 3";
  } catch (const std::out_of_range& e) {
    EXPECT_EQ(std::string(e.what()), "gather: index 3 is out of range for a dataset of 3 samples");
  }
  try {
    examples->slice(2, 2);
    FAIL() << "sliced past the end";
  } catch (const std::out_of_range& e) {
    EXPECT_EQ(std::string(e.what()),
              "slice: samples [2, 4) are out of range for a dataset of 3 samples");
  }
}

TEST_F(NpyExamplesTest, DescribesFilesReadAsStored) {
  write("s/inputs.npy", npyBytes<float>("<f4", "(1, 13)", std::vector<float>(13, 1.0f)));
  write("s/targets.npy", npyBytes<float>("<f4", "(1, 1)", {2.0f}));
  EXPECT_EQ(openNpyExamples(dir_ + "/s/")->describe(),
            dir_ + "/s/ (npy: inputs float32 [1, 13], targets float32 [1, 1])");
}

TEST_F(NpyExamplesTest, RejectsMismatchedAndMissingFiles) {
  const std::string dir = writeSet("bad", 4);
  try {
    openNpyExamples(dir);
    FAIL() << "opened 3 inputs with 4 targets";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()),
              dir +
                  ": inputs.npy has 3 rows but targets.npy has 4; sample i is row i of both, so "
                  "their first dimensions must agree");
  }
  std::remove((dir + "/targets.npy").c_str());
  try {
    openNpyExamples(dir);
    FAIL() << "opened without targets.npy";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()),
              dir +
                  "/targets.npy: not found; data.format npy wants a directory with inputs.npy "
                  "and targets.npy (numpy.save)");
  }
  try {
    openNpyExamples(dir_ + "/nowhere");
    FAIL() << "opened a missing directory";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()),
              dir_ +
                  "/nowhere/inputs.npy: not found; data.format npy wants a directory with "
                  "inputs.npy and targets.npy (numpy.save)");
  }
}

class TokenExamplesTest : public testing::NpyTempDir {
 protected:
  // A uint16 stream 1000, 1003, 1006, ...: token k is 1000 + 3k.
  std::string writeStream(int64_t tokens) {
    std::vector<uint16_t> ids;
    for (int64_t k = 0; k < tokens; ++k) ids.push_back(static_cast<uint16_t>(1000 + 3 * k));
    return write("s.npy", npyBytes<uint16_t>("<u2", "(" + std::to_string(tokens) + ",)", ids));
  }
  static std::vector<int64_t> run(int64_t first, int64_t count) {
    std::vector<int64_t> ids;
    for (int64_t k = first; k < first + count; ++k) ids.push_back(1000 + 3 * k);
    return ids;
  }
  std::string errorFor(const std::string& path, int64_t seq_len) {
    try {
      TokenExamples::open(path, seq_len);
    } catch (const DataError& e) {
      return e.what();
    }
    return "(no exception)";
  }
};

TEST_F(TokenExamplesTest, ReadsWindowsOfSeqLenPlusOne) {
  const std::string path = writeStream(22);
  const auto tokens = TokenExamples::open(path, 4);
  EXPECT_EQ(tokens->size(), 5);  // (22 - 1) / 4
  EXPECT_EQ(tokens->seqLen(), 4);
  EXPECT_EQ(tokens->tokenCount(), 22);
  EXPECT_EQ(tokens->minToken(), 1000);
  EXPECT_EQ(tokens->maxToken(), 1063);
  EXPECT_EQ(tokens->describe(), path + " (tokens: 22 uint16, windows of 4+1)");
  const Batch batch = tokens->gather({1, 4, 0});
  EXPECT_EQ(batch.inputs.sizes().vec(), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(batch.inputs.scalar_type(), torch::kInt64);
  EXPECT_EQ(batch.targets.scalar_type(), torch::kInt64);
  std::vector<int64_t> inputs, targets;
  for (const int64_t i : {1, 4, 0}) {
    for (const int64_t id : run(4 * i, 4)) inputs.push_back(id);
    for (const int64_t id : run(4 * i + 1, 4)) targets.push_back(id);
  }
  EXPECT_EQ(values<int64_t>(batch.inputs), inputs);
  EXPECT_EQ(values<int64_t>(batch.targets), targets);
  // The last window ends on token 20 of 0..21: token 21 is in no window.
  EXPECT_EQ(values<int64_t>(tokens->gather({4}).targets).back(), 1000 + 3 * 20);
  const Batch slice = tokens->slice(2, 3);
  EXPECT_EQ(slice.inputs.sizes().vec(), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(values<int64_t>(slice.inputs), run(8, 12));
  EXPECT_EQ(values<int64_t>(slice.targets), run(9, 12));
  try {
    tokens->gather({5});
    FAIL() << "gathered window 5 of 5";
  } catch (const std::out_of_range& e) {
    EXPECT_EQ(std::string(e.what()), "gather: index 5 is out of range for a dataset of 5 samples");
  }
}

TEST_F(TokenExamplesTest, AnExactFitUsesEveryToken) {
  const auto tokens = TokenExamples::open(writeStream(9), 4);
  EXPECT_EQ(tokens->size(), 2);
  EXPECT_EQ(values<int64_t>(tokens->slice(0, 2).targets), run(1, 8));
  EXPECT_EQ(TokenExamples::open(writeStream(2), 1)->size(), 1);
}

TEST_F(TokenExamplesTest, ReadsEveryIntegerDtype) {
  const auto check = [&](const std::string& bytes, int64_t lo, int64_t hi) {
    const auto tokens = TokenExamples::open(write("t.npy", bytes), 2);
    EXPECT_EQ(tokens->minToken(), lo);
    EXPECT_EQ(tokens->maxToken(), hi);
    return values<int64_t>(tokens->gather({0}).targets);
  };
  EXPECT_EQ(check(npyBytes<uint8_t>("|u1", "(3,)", {255, 0, 7}), 0, 255),
            (std::vector<int64_t>{0, 7}));
  EXPECT_EQ(check(npyBytes<int16_t>("<i2", "(3,)", {5, 32767, 1}), 1, 32767),
            (std::vector<int64_t>{32767, 1}));
  EXPECT_EQ(check(npyBytes<int32_t>("<i4", "(3,)", {9, 70000, 0}), 0, 70000),
            (std::vector<int64_t>{70000, 0}));
  const int64_t big = int64_t{1} << 40;
  EXPECT_EQ(check(npyBytes<int64_t>("<i8", "(3,)", {3, big, 4}), 3, big),
            (std::vector<int64_t>{big, 4}));
}

TEST_F(TokenExamplesTest, RejectsBadStreams) {
  const std::string p = dir_ + "/t.npy";
  EXPECT_EQ(errorFor(write("t.npy", npyBytes<int32_t>("<i4", "(6,)", {5, 2, 0, -7, 3, -1})), 1),
            p + ": token 3 is -7; token ids must be non-negative");
  const int64_t low = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(errorFor(write("t.npy", npyBytes<int64_t>("<i8", "(2,)", {1, low})), 1),
            p + ": token 1 is " + std::to_string(low) + "; token ids must be non-negative");
  EXPECT_EQ(errorFor(write("t.npy", npyBytes<uint8_t>("|u1", "(2, 2)", {1, 2, 3, 4})), 1),
            p + ": a token stream is a 1-D array, but this one has shape (2, 2); save a.ravel()");
  EXPECT_EQ(errorFor(write("t.npy", npyBytes<float>("<f4", "(2,)", {1, 2})), 1),
            p + ": token ids must be integers (uint8, uint16, int16, int32 or int64), not "
                "float32; save a.astype(numpy.uint16) or similar");
  const std::string s = writeStream(4);
  EXPECT_EQ(errorFor(s, 4), "seq_len 4 is longer than the token stream " + s +
                                " (4 tokens); one sample needs seq_len + 1 tokens");
  EXPECT_EQ(errorFor(write("t.npy", npyBytes<uint8_t>("|u1", "(0,)", {})), 1),
            "seq_len 1 is longer than the token stream " + p +
                " (0 tokens); one sample needs seq_len + 1 tokens");
  EXPECT_EQ(errorFor(dir_ + "/absent.npy", 1), dir_ + "/absent.npy: not found");
  try {
    TokenExamples::open(s, 0);
    FAIL() << "opened with seq_len 0";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "tokens: seq_len must be at least 1, got 0");
  }
}

// Resident memory of this process, from /proc/self/statm (pages).
int64_t residentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

// An 8 GiB inputs.npy that is all hole but three rows: opening it and gathering them must touch
// only their pages (and neither read nor allocate the rest).
TEST_F(NpyExamplesTest, MapsASparseFileLargerThanWhatItReads) {
  constexpr int64_t kRows = int64_t{1} << 21;
  constexpr int64_t kRowFloats = 1024;  // 4 KiB rows: 8 GiB in all
  const std::string header = npyHeader(
      npyDict("<f4", "(" + std::to_string(kRows) + ", " + std::to_string(kRowFloats) + ")"));
  const std::string inputs = write("big/inputs.npy", header);
  ASSERT_EQ(::truncate(inputs.c_str(), static_cast<off_t>(header.size() + (kRows << 12))), 0);
  {
    std::fstream f(inputs, std::ios::in | std::ios::out | std::ios::binary);
    for (const int64_t row : {int64_t{0}, kRows / 2, kRows - 1}) {
      const std::vector<float> v(kRowFloats, static_cast<float>(row) + 0.5f);
      f.seekp(static_cast<std::streamoff>(header.size() + (row << 12)));
      f.write(reinterpret_cast<const char*>(v.data()), kRowFloats * 4);
    }
  }
  const std::string targets_header = npyHeader(npyDict("|u1", "(" + std::to_string(kRows) + ",)"));
  const std::string targets = write("big/targets.npy", targets_header);
  ASSERT_EQ(::truncate(targets.c_str(), static_cast<off_t>(targets_header.size() + kRows)), 0);
  struct stat st {};
  ASSERT_EQ(::stat(inputs.c_str(), &st), 0);
  if (st.st_blocks * 512 > (int64_t{1} << 30)) GTEST_SKIP() << "this file system wrote no hole";

  const int64_t before = residentBytes();
  const auto examples = openNpyExamples(dir_ + "/big");
  ASSERT_EQ(examples->size(), kRows);
  const Batch batch = examples->gather({kRows - 1, 0, kRows / 2, 7});
  EXPECT_EQ(batch.inputs.sizes().vec(), (std::vector<int64_t>{4, kRowFloats}));
  const torch::Tensor first = batch.inputs.select(1, 0);
  EXPECT_EQ(values<float>(first), (std::vector<float>{kRows - 0.5f, 0.5f, kRows / 2 + 0.5f, 0}));
  EXPECT_EQ(batch.inputs[2][kRowFloats - 1].item<float>(), kRows / 2 + 0.5f);
  EXPECT_EQ(values<int64_t>(batch.targets), (std::vector<int64_t>{0, 0, 0, 0}));
  // A few pages of rows, the headers and readahead around them; nowhere near 8 GiB.
  EXPECT_LT(residentBytes() - before, int64_t{64} << 20);
}

// Files numpy itself wrote, with the project environment's numpy (requirements.txt).
class NumpyMadeTest : public testing::NpyTempDir {
 protected:
  void python(const std::string& code) {
    const std::string script = write("make.py",
                                     "import numpy as np\nimport numpy.lib.format as f\n"
                                     "import os\nos.chdir('" +
                                         dir_ + "')\n" + code);
    ASSERT_EQ(std::system((CUMULUS_PYTHON " " + script).c_str()), 0) << code;
  }
};

TEST_F(NumpyMadeTest, ReadsWhatNumpySaveWrites) {
  python(
      "np.save('u1.npy', np.arange(12, dtype=np.uint8).reshape(3, 4))\n"
      "np.save('u2.npy', np.array([[65535], [1]], dtype=np.uint16))\n"
      "np.save('i2.npy', np.array([-3, 4], dtype=np.int16))\n"
      "np.save('i4.npy', np.array([[-2**31, 2**31 - 1]], dtype=np.int32))\n"
      "np.save('i8.npy', np.array([2**62 + 1, -5], dtype=np.int64))\n"
      "np.save('f2.npy', np.array([0.1, -65504, 1/3], dtype=np.float16))\n"
      "np.save('f4.npy', np.linspace(0, 1, 6, dtype=np.float32).reshape(2, 3, 1))\n"
      "np.save('f8.npy', np.array([1e-300, 2.5]))\n"
      "with open('v2.npy', 'wb') as o: f.write_array(o, np.arange(3, dtype=np.int32), (2, 0))\n"
      "with open('v3.npy', 'wb') as o: f.write_array(o, np.arange(3, dtype=np.int32), (3, 0))\n");
  const auto rows = [&](const std::string& name, std::vector<int64_t> indices,
                        torch::ScalarType t) {
    return NpyArray::open(dir_ + "/" + name).gatherRows(indices, t);
  };
  EXPECT_EQ(values<int64_t>(rows("u1.npy", {2}, torch::kInt64)),
            (std::vector<int64_t>{8, 9, 10, 11}));
  EXPECT_EQ(values<int64_t>(rows("u2.npy", {0, 1}, torch::kInt64)),
            (std::vector<int64_t>{65535, 1}));
  EXPECT_EQ(values<int64_t>(rows("i2.npy", {0, 1}, torch::kInt64)), (std::vector<int64_t>{-3, 4}));
  EXPECT_EQ(values<int64_t>(rows("i4.npy", {0}, torch::kInt64)),
            (std::vector<int64_t>{-2147483647 - 1, 2147483647}));
  EXPECT_EQ(values<int64_t>(rows("i8.npy", {0, 1}, torch::kInt64)),
            (std::vector<int64_t>{(int64_t{1} << 62) + 1, -5}));
  // float16(0.1) is 0x2E66 = 0.0999755859375; float16(1/3) is 0x3555.
  EXPECT_EQ(values<float>(rows("f2.npy", {0, 1, 2}, torch::kFloat32)),
            (std::vector<float>{0.0999755859375f, -65504.0f, 0.333251953125f}));
  const NpyArray f4 = NpyArray::open(dir_ + "/f4.npy");
  EXPECT_EQ(f4.shape(), (std::vector<int64_t>{2, 3, 1}));
  EXPECT_EQ(values<float>(f4.gatherRows({1}, torch::kFloat32)),
            (std::vector<float>{0.6f, 0.8f, 1.0f}));
  EXPECT_EQ(values<double>(rows("f8.npy", {0, 1}, torch::kFloat64)),
            (std::vector<double>{1e-300, 2.5}));
  for (const char* name : {"v2.npy", "v3.npy"}) {
    EXPECT_EQ(values<int64_t>(rows(name, {2, 0}, torch::kInt64)), (std::vector<int64_t>{2, 0}))
        << name;
  }
}

TEST_F(NumpyMadeTest, RejectsWhatWeDoNotRead) {
  python(
      "np.save('fortran.npy', np.asfortranarray(np.zeros((2, 3), dtype=np.float32)))\n"
      "np.save('big.npy', np.zeros(3, dtype='>i4'))\n"
      "np.save('scalar.npy', np.float32(3))\n"
      "np.save('bool.npy', np.zeros(3, dtype=bool))\n"
      "np.save('tokens.npy', np.frombuffer(b'hello world', dtype=np.uint8))\n");
  const auto error = [&](const std::string& name) {
    try {
      NpyArray::open(dir_ + "/" + name);
    } catch (const DataError& e) {
      return std::string(e.what()).substr(dir_.size() + 1);
    }
    return std::string("(no exception)");
  };
  EXPECT_EQ(error("fortran.npy"),
            "fortran.npy: Fortran order is not supported; save numpy.ascontiguousarray(a)");
  EXPECT_EQ(error("big.npy"),
            "big.npy: big-endian data ('>i4') is not supported; save a.astype('<i4') instead");
  EXPECT_EQ(error("scalar.npy"),
            "scalar.npy: a 0-d array (shape ()) has no rows; save a 1-D or "
            "larger array, e.g. numpy.atleast_1d(a)");
  EXPECT_EQ(error("bool.npy"),
            "bool.npy: unsupported dtype '|b1' (bool); supported: uint8, "
            "uint16, int16, int32, int64, float16, float32, float64, "
            "little-endian");
  const auto tokens = TokenExamples::open(dir_ + "/tokens.npy", 5);
  EXPECT_EQ(tokens->size(), 2);
  EXPECT_EQ(values<int64_t>(tokens->gather({1}).inputs),
            (std::vector<int64_t>{' ', 'w', 'o', 'r', 'l'}));
  EXPECT_EQ(tokens->minToken(), ' ');
  EXPECT_EQ(tokens->maxToken(), 'w');
}

}  // namespace
}  // namespace cumulus::data
