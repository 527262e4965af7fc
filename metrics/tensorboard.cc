#include "metrics/tensorboard.h"

#include <fcntl.h>
#include <limits.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <utility>
#include <vector>

#include "base/crc32c.h"
#include "proto/tensorboard_event.pb.h"

namespace cumulus::metrics {
namespace {

// Tells apart the files of two writers created in one process within one second.
std::atomic<uint64_t> next_file_number{0};

std::string hostName() {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

void createDirectory(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (!ec && !std::filesystem::is_directory(dir, ec) && !ec) {
    ec = std::make_error_code(std::errc::not_a_directory);
  }
  if (ec) {
    throw std::runtime_error("cannot create the TensorBoard directory " + dir + ": " +
                             ec.message());
  }
}

void appendLittleEndian(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFFu));
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& dir, WallClock clock)
    : clock_(std::move(clock)) {
  if (!clock_) {
    clock_ = [] {
      return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
          .count();
    };
  }
  createDirectory(dir);
  const double now = clock_();
  path_ =
      (std::filesystem::path(dir) /
       ("events.out.tfevents." + std::to_string(static_cast<int64_t>(std::floor(now))) + "." +
        hostName() + "." + std::to_string(::getpid()) + "." + std::to_string(next_file_number++)))
          .string();
  fd_.reset(::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644));
  if (!fd_.valid()) {
    throw std::runtime_error("cannot create the TensorBoard events file " + path_ + ": " +
                             std::strerror(errno));
  }
  tensorboard::Event event;
  event.set_wall_time(now);
  event.set_step(0);
  event.set_file_version("brain.Event:2");
  writeRecord(event.SerializeAsString());
}

void TensorBoardWriter::scalar(const std::string& tag, int64_t step, double value) {
  scalar(tag, step, value, clock_());
}

void TensorBoardWriter::scalar(const std::string& tag, int64_t step, double value,
                               double wall_time) {
  scalars(step, {{tag, value}}, wall_time);
}

void TensorBoardWriter::scalars(int64_t step,
                                const std::vector<std::pair<std::string, double>>& values) {
  scalars(step, values, clock_());
}

void TensorBoardWriter::scalars(int64_t step,
                                const std::vector<std::pair<std::string, double>>& values,
                                double wall_time) {
  tensorboard::Event event;
  event.set_wall_time(wall_time);
  event.set_step(step);
  for (const auto& [tag, value] : values) {
    tensorboard::Summary::Value* v = event.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  writeRecord(event.SerializeAsString());
}

void TensorBoardWriter::flush() {
  if (::fdatasync(fd_.get()) != 0) {
    throw std::runtime_error("cannot write TensorBoard events to " + path_ + ": " +
                             std::strerror(errno));
  }
}

// One TFRecord, in one write(2) where the kernel takes it all at once.
void TensorBoardWriter::writeRecord(const std::string& event) {
  std::string record;
  record.reserve(8 + 4 + event.size() + 4);
  appendLittleEndian(record, event.size(), 8);
  appendLittleEndian(record, base::maskedCrc32c(record.data(), 8), 4);
  record += event;
  appendLittleEndian(record, base::maskedCrc32c(event.data(), event.size()), 4);
  size_t done = 0;
  while (done < record.size()) {
    const ssize_t n = ::write(fd_.get(), record.data() + done, record.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      throw std::runtime_error("cannot write TensorBoard events to " + path_ + ": " +
                               std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
}

namespace {

// The number under `key`, if the record has one (null, a non-finite number, gives none).
std::optional<double> numberAt(const nlohmann::ordered_json& record, const char* key) {
  const auto it = record.find(key);
  if (it == record.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

}  // namespace

void TensorBoardSink::write(const nlohmann::ordered_json& record) {
  if (!record.is_object()) return;
  const auto type_it = record.find("type");
  const auto step_it = record.find("step");
  if (type_it == record.end() || !type_it->is_string()) return;
  if (step_it == record.end() || !step_it->is_number_integer()) return;
  const std::string type = type_it->get<std::string>();
  const int64_t step = step_it->get<int64_t>();
  const std::optional<double> time = numberAt(record, "time");
  // Every value of the record in one event (one write): TensorBoard reads each value of a summary.
  std::vector<std::pair<std::string, double>> values;
  const auto put = [&](const std::string& tag, double value) { values.emplace_back(tag, value); };
  const auto putKeys = [&](std::initializer_list<const char*> keys) {
    for (const char* key : keys) {
      if (const std::optional<double> v = numberAt(record, key)) put(type + "/" + key, *v);
    }
  };
  if (type == "train") {
    // outer_rounds and outer_wait_s only where the record has them (low-communication training).
    putKeys({"loss", "lr", "samples_per_sec", "step_time_ms", "comm_wait_ms", "comm_bytes_sent",
             "outer_rounds", "outer_wait_s"});
  } else if (type == "eval") {
    putKeys({"test_loss", "test_accuracy"});
  } else if (type == "checkpoint") {
    putKeys({"stall_ms"});
  } else if (type == "scalar") {  // a series of the program's own, under its name
    const auto name = record.find("name");
    const std::optional<double> v = numberAt(record, "value");
    if (name != record.end() && name->is_string() && v) put(name->get<std::string>(), *v);
  } else if (type == "goodput") {
    for (const auto& [key, value] : record.items()) {
      if (key == "step" || key == "time" || !value.is_number()) continue;
      put("goodput/" + key, value.get<double>());
    }
  }
  if (values.empty()) return;
  if (time) {
    writer_.scalars(step, values, *time);
  } else {
    writer_.scalars(step, values);
  }
}

void TensorBoardRecords::record(const nlohmann::ordered_json& record) {
  if (!writer_) {
    writer_ = std::make_unique<TensorBoardWriter>(dir_);
    sink_ = std::make_unique<TensorBoardSink>(*writer_);
  }
  sink_->write(record);
}

}  // namespace cumulus::metrics
