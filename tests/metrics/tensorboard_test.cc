// TensorBoard event files (metrics/tensorboard.h), read back by an independent reader
// (read_tfevents.py: its own CRC-32C, protoc's Python module) as TensorBoard reads them. No
// LibTorch.
#include "metrics/tensorboard.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "base/crc32c.h"
#include "tests/test_dir.h"

// The reader runs in the project environment's Python (CUMULUS_PYTHON, with protobuf); a build
// that names none (a sanitizer build configured by hand) cannot read the events back.
#ifndef CUMULUS_PYTHON
#error "tests/metrics needs CUMULUS_PYTHON, the project environment's Python (.venv/bin/python)"
#endif

namespace cumulus::metrics {
namespace {

constexpr double kClock = 1700000000.25;  // exactly representable
double fixedClock() { return kClock; }

struct Reading {
  int status = -1;                     // the reader's exit status
  std::string output;                  // stdout and stderr
  std::vector<nlohmann::json> events;  // stdout's lines, parsed
};

Reading readEvents(const std::string& path) {
  const std::string command =
      CUMULUS_PYTHON " " CUMULUS_SOURCE_DIR "/tests/metrics/read_tfevents.py '" + path + "' 2>&1";
  Reading r;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) r.output.append(buffer, n);
  const int raw = ::pclose(pipe);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  std::istringstream lines(r.output);
  std::string line;
  while (std::getline(lines, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object()) r.events.push_back(j);
  }
  return r;
}

// What TensorBoard plots for a value written as a double: its float32 rounding.
double asFloat(double v) { return static_cast<double>(static_cast<float>(v)); }

struct Scalar {
  std::string tag;
  int64_t step;
  double value;
  double wall_time;
};

// Checks that the reader accepts `path` and finds the version record, then exactly `scalars`.
void expectEvents(const std::string& path, const std::vector<Scalar>& scalars) {
  const Reading r = readEvents(path);
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_EQ(r.events.size(), scalars.size() + 1) << r.output;
  EXPECT_EQ(r.events[0].value("file_version", ""), "brain.Event:2") << r.output;
  EXPECT_EQ(r.events[0]["step"], 0);
  EXPECT_EQ(r.events[0]["wall_time"].get<double>(), kClock);
  for (size_t i = 0; i < scalars.size(); ++i) {
    const nlohmann::json& e = r.events[i + 1];
    EXPECT_EQ(e.value("tag", ""), scalars[i].tag) << "event " << i + 1 << ": " << e.dump();
    EXPECT_EQ(e["step"].get<int64_t>(), scalars[i].step) << e.dump();
    EXPECT_EQ(e["value"].get<double>(), asFloat(scalars[i].value)) << e.dump();
    EXPECT_EQ(e["wall_time"].get<double>(), scalars[i].wall_time) << e.dump();
    EXPECT_FALSE(e.contains("file_version")) << e.dump();
  }
}

TEST(Crc32cTest, KnownVectorsAndIncremental) {
  EXPECT_EQ(base::crc32c("123456789", 9), 0xE3069283u);
  const std::vector<unsigned char> zeros(32, 0);
  EXPECT_EQ(base::crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(base::crc32c("", 0), 0u);
  const std::string text = "The quick brown fox jumps over the lazy dog";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    EXPECT_EQ(base::crc32c(text.data() + cut, text.size() - cut, base::crc32c(text.data(), cut)),
              base::crc32c(text.data(), text.size()))
        << "cut at " << cut;
  }
  const uint32_t crc = 0xE3069283u;
  EXPECT_EQ(base::maskedCrc32c("123456789", 9), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

TEST(TensorBoardWriterTest, TheReaderFindsTheVersionRecordThenEveryScalar) {
  const auto dir = testing::freshTestDir("tensorboard") / "run" / "tensorboard";  // parents too
  std::string path;
  {
    TensorBoardWriter writer(dir.string(), fixedClock);
    path = writer.path();
    writer.scalar("train/loss", 1, 2.302585092994046);
    writer.scalar("train/loss", 2, 0.1);
    writer.scalar("train/lr", 2, 1e-3);
    writer.scalar("eval/test_accuracy", 1 << 20, 0.875, 1700000123.5);
    writer.scalar("big/step", int64_t{1} << 40, -3.0e7);
    writer.flush();
  }
  const std::string name = std::filesystem::path(path).filename().string();
  EXPECT_EQ(std::filesystem::path(path).parent_path(), dir);
  EXPECT_EQ(name.rfind("events.out.tfevents.1700000000.", 0), 0u) << name;
  EXPECT_NE(name.find("." + std::to_string(::getpid()) + "."), std::string::npos) << name;
  expectEvents(path, {{"train/loss", 1, 2.302585092994046, kClock},
                      {"train/loss", 2, 0.1, kClock},
                      {"train/lr", 2, 1e-3, kClock},
                      {"eval/test_accuracy", 1 << 20, 0.875, 1700000123.5},
                      {"big/step", int64_t{1} << 40, -3.0e7, kClock}});
}

TEST(TensorBoardWriterTest, TwoWritersInOneSecondWriteTwoFiles) {
  const auto dir = testing::freshTestDir("tensorboard");
  TensorBoardWriter a(dir.string(), fixedClock);
  TensorBoardWriter b(dir.string(), fixedClock);
  EXPECT_NE(a.path(), b.path());
  a.scalar("x", 1, 1.0);
  expectEvents(a.path(), {{"x", 1, 1.0, kClock}});
  expectEvents(b.path(), {});
}

TEST(TensorBoardSinkTest, MapsEachRecordTypeToItsTags) {
  const auto dir = testing::freshTestDir("tensorboard");
  TensorBoardWriter writer(dir.string(), fixedClock);
  TensorBoardSink sink(writer);
  using J = nlohmann::ordered_json;
  sink.write(J{{"type", "train"},
               {"step", 3},
               {"epoch", 0},
               {"loss", 0.5},
               {"lr", 0.01},
               {"samples_per_sec", 1234.5},
               {"step_time_ms", 20.25},
               {"compute_ms", 15.0},
               {"comm_wait_ms", 5.25},
               {"comm_bytes_sent", 1048576},
               {"time", 1700000100.5}});
  // No time; the outer rounds of low-communication training.
  sink.write(J{{"type", "train"},
               {"step", 4},
               {"loss", nullptr},
               {"lr", 0.02},
               {"comm_bytes_sent", 2097152},
               {"outer_rounds", 2},
               {"outer_wait_s", 0.5}});
  sink.write(J{{"type", "eval"},
               {"step", 4},
               {"test_loss", 0.75},
               {"test_accuracy", 0.5},
               {"time", 1700000101.0}});
  sink.write(J{{"type", "eval"}, {"step", 5}, {"test_loss", 0.625}, {"time", 1700000102.0}});
  sink.write(J{{"type", "goodput"},
               {"step", 6},
               {"productive_s", 90.0},
               {"restart_s", 10.0},
               {"note", "text"},
               {"productive_ratio", 0.9},
               {"time", 1700000103.0}});
  sink.write(J{{"type", "checkpoint"},
               {"step", 6},
               {"stall_ms", 12.5},
               {"path", "/x"},
               {"time", 1700000104.0}});
  sink.write(J{{"type", "balance"}, {"step", 6}, {"predicted_speedup", 1.5}});
  sink.write(J{{"type", "train"}, {"loss", 1.0}});  // no step: nothing
  sink.write(J{{"type", "summary"}, {"step", 7}, {"loss", 1.0}});
  expectEvents(writer.path(), {{"train/loss", 3, 0.5, 1700000100.5},
                               {"train/lr", 3, 0.01, 1700000100.5},
                               {"train/samples_per_sec", 3, 1234.5, 1700000100.5},
                               {"train/step_time_ms", 3, 20.25, 1700000100.5},
                               {"train/comm_wait_ms", 3, 5.25, 1700000100.5},
                               {"train/comm_bytes_sent", 3, 1048576, 1700000100.5},
                               {"train/lr", 4, 0.02, kClock},
                               {"train/comm_bytes_sent", 4, 2097152, kClock},
                               {"train/outer_rounds", 4, 2, kClock},
                               {"train/outer_wait_s", 4, 0.5, kClock},
                               {"eval/test_loss", 4, 0.75, 1700000101.0},
                               {"eval/test_accuracy", 4, 0.5, 1700000101.0},
                               {"eval/test_loss", 5, 0.625, 1700000102.0},
                               {"goodput/productive_s", 6, 90.0, 1700000103.0},
                               {"goodput/restart_s", 6, 10.0, 1700000103.0},
                               {"goodput/productive_ratio", 6, 0.9, 1700000103.0},
                               {"checkpoint/stall_ms", 6, 12.5, 1700000104.0}});
}

std::string fileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void writeBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

uint64_t littleEndian(const std::string& bytes, size_t at, int size) {
  uint64_t v = 0;
  for (int i = size - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(bytes[at + i]);
  return v;
}

// Where each record starts, walking the lengths (the framing is checked by the reader).
std::vector<size_t> recordStarts(const std::string& bytes) {
  std::vector<size_t> starts;
  for (size_t at = 0; at + 12 <= bytes.size(); at += 12 + littleEndian(bytes, at, 8) + 4) {
    starts.push_back(at);
  }
  return starts;
}

// The data of record `i`.
std::string recordData(const std::string& bytes, size_t i) {
  const size_t at = recordStarts(bytes).at(i);
  return bytes.substr(at + 12, littleEndian(bytes, at, 8));
}

std::string leBytes(uint64_t v, int size) {
  std::string s;
  for (int i = 0; i < size; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  return s;
}

// The records byte for byte as TensorBoard's event.proto and summary.proto number the fields
// (independently of proto/tensorboard_event.proto): Event.wall_time 1 (fixed64), step 2
// (varint), file_version 3 and summary 5 (length-delimited); Summary.value 1; Value.tag 1,
// simple_value 2 (fixed32).
TEST(TensorBoardWriterTest, RecordsCarryTensorBoardsFieldNumbers) {
  const auto dir = testing::freshTestDir("tensorboard");
  std::string path;
  {
    TensorBoardWriter writer(dir.string(), fixedClock);
    path = writer.path();
    writer.scalar("a", 7, 1.0);
  }
  const std::string bytes = fileBytes(path);
  ASSERT_EQ(recordStarts(bytes).size(), 2u);
  uint64_t clock_bits;
  std::memcpy(&clock_bits, &kClock, 8);
  const std::string wall = "\x09" + leBytes(clock_bits, 8);
  EXPECT_EQ(recordData(bytes, 0), wall +
                                      "\x1a\x0d"
                                      "brain.Event:2");
  const float one = 1.0f;
  uint32_t one_bits;
  std::memcpy(&one_bits, &one, 4);
  const std::string value = std::string(
                                "\x0a\x01"
                                "a"
                                "\x15") +
                            leBytes(one_bits, 4);
  const std::string summary = "\x0a" + leBytes(value.size(), 1) + value;
  EXPECT_EQ(recordData(bytes, 1), wall +
                                      "\x10\x07"
                                      "\x2a" +
                                      leBytes(summary.size(), 1) + summary);
}

TEST(TensorBoardReaderTest, ACorruptedOrTruncatedRecordIsNamed) {
  const auto dir = testing::freshTestDir("tensorboard");
  std::string path;
  {
    TensorBoardWriter writer(dir.string(), fixedClock);
    path = writer.path();
    writer.scalar("a", 1, 1.0);
    writer.scalar("b", 2, 2.0);
  }
  const std::string good = fileBytes(path);
  const std::vector<size_t> starts = recordStarts(good);
  ASSERT_EQ(starts.size(), 3u);
  // One bit of the last record's data.
  std::string bad = good;
  bad[starts[2] + 12 + 3] ^= 0x01;
  writeBytes(path, bad);
  Reading r = readEvents(path);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("record 2: bad data CRC"), std::string::npos) << r.output;
  // One bit of the second record's length.
  bad = good;
  bad[starts[1] + 1] ^= 0x40;
  writeBytes(path, bad);
  r = readEvents(path);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("record 1: bad length CRC"), std::string::npos) << r.output;
  // A torn last record, as a killed writer may leave.
  writeBytes(path, good.substr(0, good.size() - 3));
  r = readEvents(path);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("record 2: truncated"), std::string::npos) << r.output;
  // And the good file reads.
  writeBytes(path, good);
  EXPECT_EQ(readEvents(path).status, 0);
}

TEST(TensorBoardWriterTest, ADirectoryThatCannotBeCreatedIsNamed) {
  const auto dir = testing::freshTestDir("tensorboard");
  const std::string file = (dir / "regular").string();
  std::ofstream(file) << "x";
  const std::string bad = file + "/tensorboard";
  try {
    TensorBoardWriter writer(bad, fixedClock);
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Not a directory"), std::string::npos) << e.what();
  }
  // A regular file where the directory should be.
  EXPECT_THROW(TensorBoardWriter(file, fixedClock), std::runtime_error);
}

}  // namespace
}  // namespace cumulus::metrics
