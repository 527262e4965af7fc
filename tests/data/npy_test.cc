// NpyArray: the header checks (every message), the dtypes and their conversions, the shapes.
#include "data/npy.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/data/npy_writer.h"
#include "tests/data/tensor_values.h"

namespace cumulus::data {
namespace {

using testing::npyBytes;
using testing::npyDict;
using testing::npyHeader;
using testing::rawBytes;

class NpyArrayTest : public testing::NpyTempDir {
 protected:
  // The DataError text NpyArray::open throws for these bytes, or "(no exception)".
  std::string errorFor(const std::string& bytes) {
    const std::string path = write("f.npy", bytes);
    try {
      NpyArray::open(path);
    } catch (const DataError& e) {
      return e.what();
    }
    return "(no exception)";
  }
  std::string path() const { return dir_ + "/f.npy"; }
};

using testing::values;

TEST_F(NpyArrayTest, GathersIntegerDtypesAsInt64) {
  const NpyArray u8 =
      NpyArray::open(write("u8.npy", npyBytes<uint8_t>("|u1", "(3, 2)", {0, 1, 2, 3, 254, 255})));
  EXPECT_EQ(u8.dtype(), NpyDType::kUInt8);
  EXPECT_EQ(values<int64_t>(u8.gatherRows({2, 0}, torch::kInt64)),
            (std::vector<int64_t>{254, 255, 0, 1}));
  const NpyArray u16 =
      NpyArray::open(write("u16.npy", npyBytes<uint16_t>("<u2", "(3,)", {65535, 7, 50000})));
  EXPECT_EQ(values<int64_t>(u16.gatherRows({0, 2, 0}, torch::kInt64)),
            (std::vector<int64_t>{65535, 50000, 65535}));
  const NpyArray i16 =
      NpyArray::open(write("i16.npy", npyBytes<int16_t>("<i2", "(2,)", {-32768, 32767})));
  EXPECT_EQ(values<int64_t>(i16.gatherRows({1, 0}, torch::kInt64)),
            (std::vector<int64_t>{32767, -32768}));
  const NpyArray i32 = NpyArray::open(
      write("i32.npy", npyBytes<int32_t>("<i4", "(2, 1)", {-2147483647 - 1, 2147483647})));
  EXPECT_EQ(values<int64_t>(i32.gatherRows({0, 1}, torch::kInt64)),
            (std::vector<int64_t>{-2147483647 - 1, 2147483647}));
  // Past 2^53: exact only if nothing goes through a double.
  const int64_t big = (int64_t{1} << 62) + 1;
  const NpyArray i64 =
      NpyArray::open(write("i64.npy", npyBytes<int64_t>("<i8", "(2,)", {big, -big})));
  EXPECT_EQ(values<int64_t>(i64.gatherRows({1, 0}, torch::kInt64)),
            (std::vector<int64_t>{-big, big}));
  EXPECT_EQ(values<float>(i16.gatherRows({0}, torch::kFloat32)), (std::vector<float>{-32768.0f}));
}

TEST_F(NpyArrayTest, GathersFloatingDtypes) {
  const NpyArray f32 = NpyArray::open(
      write("f32.npy", npyBytes<float>("<f4", "(2, 2)", {0.1f, -2.5f, 1e30f, 3.0f})));
  EXPECT_EQ(values<float>(f32.gatherRows({1, 0}, torch::kFloat32)),
            (std::vector<float>{1e30f, 3.0f, 0.1f, -2.5f}));
  EXPECT_EQ(values<double>(f32.gatherRows({0}, torch::kFloat64)),
            (std::vector<double>{static_cast<double>(0.1f), -2.5}));
  const NpyArray f64 =
      NpyArray::open(write("f64.npy", npyBytes<double>("<f8", "(2,)", {0.1, -1e300})));
  EXPECT_EQ(values<float>(f64.gatherRows({0, 1}, torch::kFloat32)),
            (std::vector<float>{0.1f, -std::numeric_limits<float>::infinity()}));
  EXPECT_EQ(values<double>(f64.gatherRows({0, 1}, torch::kFloat64)),
            (std::vector<double>{0.1, -1e300}));
}

TEST_F(NpyArrayTest, WidensFloat16Exactly) {
  // 1, -2, the float16 nearest 1/3, the largest finite, the smallest subnormal, -0, +inf.
  const NpyArray f16 = NpyArray::open(write(
      "f16.npy",
      npyBytes<uint16_t>("<f2", "(7,)", {0x3C00, 0xC000, 0x3555, 0x7BFF, 0x0001, 0x8000, 0x7C00})));
  EXPECT_EQ(f16.dtype(), NpyDType::kFloat16);
  const std::vector<float> got =
      values<float>(f16.gatherRows({0, 1, 2, 3, 4, 5, 6}, torch::kFloat32));
  const std::vector<float> want = {1.0f,
                                   -2.0f,
                                   0.333251953125f,
                                   65504.0f,
                                   5.9604644775390625e-8f,
                                   -0.0f,
                                   std::numeric_limits<float>::infinity()};
  EXPECT_EQ(got, want);
  EXPECT_TRUE(std::signbit(got[5]));
}

TEST_F(NpyArrayTest, ShapesRowsAndTrailingDimensions) {
  std::vector<float> data(24);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i);
  const NpyArray a = NpyArray::open(write("a.npy", npyBytes<float>("<f4", "(2, 3, 4)", data)));
  EXPECT_EQ(a.shape(), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(a.rows(), 2);
  EXPECT_EQ(a.itemSize(), 4u);
  EXPECT_EQ(a.rowBytes(), 48u);
  const torch::Tensor row = a.gatherRows({1}, torch::kFloat32);
  EXPECT_EQ(row.sizes().vec(), (std::vector<int64_t>{1, 3, 4}));
  EXPECT_EQ(row[0][2][3].item<float>(), 23.0f);
  const torch::Tensor both = a.sliceRows(0, 2, torch::kFloat32);
  EXPECT_EQ(values<float>(both), data);
  EXPECT_EQ(a.gatherRows({}, torch::kFloat32).sizes().vec(), (std::vector<int64_t>{0, 3, 4}));

  // No data at all: the header is mapped, nothing after it.
  const NpyArray empty = NpyArray::open(write("e.npy", npyBytes<float>("<f4", "(0, 3)", {})));
  EXPECT_EQ(empty.rows(), 0);
  EXPECT_EQ(empty.sliceRows(0, 0, torch::kFloat32).sizes().vec(), (std::vector<int64_t>{0, 3}));
}

TEST_F(NpyArrayTest, ReadsVersions2And3AndUnalignedData) {
  for (const int major : {2, 3}) {
    const NpyArray a =
        NpyArray::open(write("v.npy", npyBytes<int32_t>("<i4", "(3,)", {7, -8, 9}, major)));
    EXPECT_EQ(values<int64_t>(a.gatherRows({2, 1, 0}, torch::kInt64)),
              (std::vector<int64_t>{9, -8, 7}))
        << "version " << major;
  }
  // A 63-byte header puts every float64 off its alignment.
  std::string bytes = npyHeader(npyDict("<f8", "(2,)"));
  bytes.erase(bytes.size() - 2, 1);
  bytes[8] = static_cast<char>(bytes[8] - 1);
  const NpyArray a = NpyArray::open(write("u.npy", bytes + rawBytes<double>({1.5, -0.25})));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 8, 7u);
  EXPECT_EQ(values<double>(a.gatherRows({1, 0}, torch::kFloat64)),
            (std::vector<double>{-0.25, 1.5}));
}

TEST_F(NpyArrayTest, AcceptsEveryDictSpelling) {
  const std::string data = rawBytes<float>({1.0f, 2.0f});
  const std::vector<std::string> dicts = {
      "{'shape': (2,), 'fortran_order': False, 'descr': '<f4'}",
      "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2,)}",
      "  { 'descr' :'<f4' ,'fortran_order':False,'shape':( 2 , ) , }  \n",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2L,), }",
      "{'descr': '=f4', 'fortran_order': False, 'shape': (2,), }",
      // One dimension > 1: Fortran and C order are the same bytes.
      "{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }",
      "{'descr': '<f4', 'fortran_order': True, 'shape': (1, 2, 1), }",
  };
  for (const std::string& dict : dicts) {
    EXPECT_EQ(errorFor(npyHeader(dict) + data), "(no exception)") << dict;
  }
  EXPECT_EQ(errorFor(npyHeader(npyDict(">u1", "(2,)")) + "ab"), "(no exception)");
  EXPECT_EQ(errorFor(npyHeader(npyDict("|u1", "(2, 0)"))), "(no exception)");
}

TEST_F(NpyArrayTest, RejectsBadPreambles) {
  const std::string p = path();
  const std::string good = npyBytes<float>("<f4", "(2,)", {1.0f, 2.0f});
  const std::string not_npy =
      p + ": not a .npy file (numpy.save writes one): it does not start with \"\\x93NUMPY\"";
  EXPECT_EQ(errorFor(""), not_npy);
  EXPECT_EQ(errorFor("PK\x03\x04 an .npz is a zip file"), not_npy);
  EXPECT_EQ(errorFor(good.substr(0, 7)), not_npy);
  std::string v4 = good;
  v4[6] = 4;
  EXPECT_EQ(errorFor(v4), p + ": .npy format version 4.0 is not supported (1.0, 2.0 and 3.0 "
                              "are); save the array again with numpy.save");
  std::string v11 = good;
  v11[7] = 1;
  EXPECT_EQ(errorFor(v11), p + ": .npy format version 1.1 is not supported (1.0, 2.0 and 3.0 "
                               "are); save the array again with numpy.save");
  EXPECT_EQ(errorFor(good.substr(0, 9)),
            p + ": truncated header: the file ends in its header length field");
  EXPECT_EQ(errorFor(good.substr(0, 50)),
            p + ": truncated header: it says it ends at byte 128 but the file has 50 bytes");
  std::string huge = npyBytes<float>("<f4", "(2,)", {1.0f, 2.0f}, 2);
  huge[10] = 0x20;  // a u32 length of 0x20xxxx: 2 MiB and more
  EXPECT_EQ(errorFor(huge), p + ": the header length 2097268 is more than the 1048576 bytes we "
                                "accept; save the array again with numpy.save");
}

TEST_F(NpyArrayTest, RejectsBadDictionaries) {
  const std::string p = path();
  const std::string resave = "; save the array again with numpy.save";
  const auto error = [&](const std::string& dict) {
    return errorFor(npyHeader(dict) + "xxxxxxxx");
  };
  EXPECT_EQ(error("{'descr': '<f4' 'fortran_order': False, 'shape': (2,), }"),
            p + ": malformed header dictionary at byte 16: expected ',', found '''" + resave);
  EXPECT_EQ(error("{'descr': '<f4', 'fortran_order': False, 'shape': (2,}"),
            p +
                ": malformed header dictionary at byte 53: expected a non-negative integer, "
                "found '}'" +
                resave);
  EXPECT_EQ(
      error("{'descr': '<f4', 'fortran_order': False, 'shape': (2 5)}"),
      p + ": malformed header dictionary at byte 53: expected ',' or ')', found '5'" + resave);
  EXPECT_EQ(error("{'descr': '<f4', 'fortran_order': false, 'shape': (2,), }"),
            p +
                ": malformed header dictionary at byte 34: expected a string, True, False or a "
                "tuple, found 'f'" +
                resave);
  EXPECT_EQ(error("{'descr': '<f4', 'fortran_order': False, 'shape': (2), }"),
            p +
                ": malformed header dictionary at byte 52: a one-element shape is written (n,), "
                "not (n)" +
                resave);
  EXPECT_EQ(error("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }"),
            p +
                ": malformed header dictionary at byte 51: expected a non-negative integer, "
                "found '-'" +
                resave);
  EXPECT_EQ(error("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'a\\b': 1}"),
            p + ": malformed header dictionary at byte 58: escapes in strings are not supported" +
                resave);
  EXPECT_EQ(error("{'descr': '<f4"),
            p + ": malformed header dictionary at byte 53: unterminated string" + resave);
  EXPECT_EQ(error("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } 1"),
            p + ": malformed header dictionary at byte 58: text after the closing '}'" + resave);
  EXPECT_EQ(error("['descr', '<f4']"),
            p + ": malformed header dictionary at byte 0: expected '{', found '['" + resave);
  EXPECT_EQ(error("{'descr': '<f4', 'shape': (2,), }"),
            p + ": the header has no 'fortran_order'" + resave);
  EXPECT_EQ(error("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,), }"),
            p + ": the header has 'descr' twice" + resave);
  EXPECT_EQ(error("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 'y'}"),
            p +
                ": unexpected key 'x' in the header (a .npy header has descr, fortran_order and "
                "shape)" +
                resave);
  EXPECT_EQ(error("{'descr': '<f4', 'fortran_order': 'no', 'shape': (2,), }"),
            p + ": 'fortran_order' must be True or False" + resave);
  EXPECT_EQ(error("{'descr': '<f4', 'fortran_order': False, 'shape': '2', }"),
            p + ": 'shape' must be a tuple such as (3,) or (2, 5)" + resave);
  EXPECT_EQ(error("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }"),
            p + ": a dimension in 'shape' does not fit in 63 bits" + resave);
}

TEST_F(NpyArrayTest, RejectsUnsupportedArrays) {
  const std::string p = path();
  const std::string supported =
      "; supported: uint8, uint16, int16, int32, int64, float16, float32, float64, little-endian";
  const auto error = [&](const std::string& dict) {
    return errorFor(npyHeader(dict) + "xxxxxxxx");
  };
  EXPECT_EQ(error(npyDict("<c8", "(1,)")), p + ": unsupported dtype '<c8' (complex64)" + supported);
  EXPECT_EQ(error(npyDict("|b1", "(8,)")), p + ": unsupported dtype '|b1' (bool)" + supported);
  EXPECT_EQ(error(npyDict("|i1", "(8,)")), p + ": unsupported dtype '|i1' (int8)" + supported);
  EXPECT_EQ(error(npyDict("<U2", "(1,)")), p + ": unsupported dtype '<U2'" + supported);
  EXPECT_EQ(error(npyDict("f4", "(2,)")), p + ": unsupported dtype 'f4'" + supported);
  EXPECT_EQ(error("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }"),
            p + ": structured dtypes (a list as 'descr') are not supported" + supported);
  EXPECT_EQ(error(npyDict(">f4", "(2,)")),
            p + ": big-endian data ('>f4') is not supported; save a.astype('<f4') instead");
  EXPECT_EQ(error(npyDict("<f4", "(2, 1)", "True")), "(no exception)");
  EXPECT_EQ(error(npyDict("<i2", "(2, 2)", "True")),
            p + ": Fortran order is not supported; save numpy.ascontiguousarray(a)");
  EXPECT_EQ(error(npyDict("<f8", "()")),
            p + ": a 0-d array (shape ()) has no rows; save a 1-D or larger array, e.g. "
                "numpy.atleast_1d(a)");
  EXPECT_EQ(error(npyDict("<f4", "(4294967296, 4294967296)")),
            p + ": shape (4294967296, 4294967296) is too large: its byte count overflows 63 bits; "
                "save the array again with numpy.save");
  EXPECT_EQ(error(npyDict("<f4", "(0, 4294967296, 4294967296)")),
            p + ": shape (0, 4294967296, 4294967296) is too large: its byte count overflows 63 "
                "bits; save the array again with numpy.save");
}

TEST_F(NpyArrayTest, RejectsDataOfTheWrongSize) {
  const std::string p = path();
  const std::string header = npyHeader(npyDict("<f4", "(2, 5)"));
  ASSERT_EQ(header.size(), 128u);
  EXPECT_EQ(errorFor(header + std::string(36, '\0')),
            p + ": holds 36 bytes of data after its 128-byte header, but shape (2, 5) of float32 "
                "needs 40; the file is truncated or damaged");
  EXPECT_EQ(errorFor(header + std::string(41, '\0')),
            p + ": holds 41 bytes of data after its 128-byte header, but shape (2, 5) of float32 "
                "needs 40; the file is truncated or damaged");
  EXPECT_EQ(errorFor(header + std::string(40, '\0')), "(no exception)");
}

TEST_F(NpyArrayTest, RejectsMissingFilesAndDirectories) {
  try {
    NpyArray::open(dir_ + "/absent.npy");
    FAIL() << "opened a missing file";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()), dir_ + "/absent.npy: not found");
  }
  try {
    NpyArray::open(dir_);
    FAIL() << "opened a directory";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()), dir_ + ": is a directory, not a regular file");
  }
}

// No writer ever opens the FIFO: a blocking open would hang the test.
TEST_F(NpyArrayTest, RefusesAFifoAtOnce) {
  const std::string path = dir_ + "/fifo.npy";
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  try {
    NpyArray::open(path);
    FAIL() << "opened a FIFO";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()), path + ": is a FIFO, not a regular file");
  }
}

TEST_F(NpyArrayTest, ChecksIndicesAndTypes) {
  const std::string p = write("a.npy", npyBytes<float>("<f4", "(3,)", {1, 2, 3}));
  const NpyArray a = NpyArray::open(p);
  try {
    a.gatherRows({0, 3, -1}, torch::kFloat32);
    FAIL() << "gathered row 3 of 3";
  } catch (const std::out_of_range& e) {
    EXPECT_EQ(std::string(e.what()), p + ": row 3 is out of range for an array of 3 rows");
  }
  try {
    a.sliceRows(2, 2, torch::kFloat32);
    FAIL() << "sliced past the end";
  } catch (const std::out_of_range& e) {
    EXPECT_EQ(std::string(e.what()), p + ": rows [2, 4) are out of range for an array of 3 rows");
  }
  try {
    a.gatherRows({0}, torch::kInt64);
    FAIL() << "read floats as int64";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), p + ": float32 data cannot be read as int64 (it would be "
                                         "truncated)");
  }
  try {
    a.gatherRows({0}, torch::kInt32);
    FAIL() << "read as int32";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              p + ": rows can be read as float32, float64 or int64, not Int");
  }
}

TEST_F(NpyArrayTest, MovesKeepTheMapping) {
  NpyArray a = NpyArray::open(write("a.npy", npyBytes<int64_t>("<i8", "(2,)", {5, 6})));
  NpyArray b = std::move(a);
  NpyArray c = NpyArray::open(write("c.npy", npyBytes<int64_t>("<i8", "(1,)", {9})));
  c = std::move(b);
  EXPECT_EQ(values<int64_t>(c.gatherRows({1, 0}, torch::kInt64)), (std::vector<int64_t>{6, 5}));
  EXPECT_EQ(dtypeName(NpyDType::kUInt16), "uint16");
  EXPECT_TRUE(isFloating(NpyDType::kFloat16));
  EXPECT_FALSE(isFloating(NpyDType::kInt64));
}

}  // namespace
}  // namespace cumulus::data
