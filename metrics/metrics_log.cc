#include "metrics/metrics_log.h"

#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "base/line_reader.h"
#include "base/regular_file.h"
#include "cumulus/errors.h"

namespace cumulus::metrics {

MetricsLog::MetricsLog(const std::string& path, WallClock clock)
    : MetricsLog(path, std::ios::trunc, std::move(clock)) {}

MetricsLog::MetricsLog(const std::string& path, std::ios::openmode mode, WallClock clock)
    : path_(path), clock_(std::move(clock)) {
  if (!clock_) {
    clock_ = [] {
      return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
          .count();
    };
  }
  // Opening a FIFO to write blocks until a reader comes; a device is no log either.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    throw UserError(path + ": is " + base::fileKindOf(st.st_mode) + ", not a regular file");
  }
  out_.open(path, std::ios::out | mode);
  if (!out_) throw std::runtime_error(path + ": cannot open for writing");
}

namespace {

// Whether a line of an earlier launch's file belongs to the first `step` steps of the run.
bool keepAfterResume(const std::string& line, int64_t step) {
  // No exceptions: a line that does not parse is the torn last line of a killed writer.
  const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!record.is_object()) return false;
  const auto type = record.find("type");
  if (type != record.end() && *type == "summary") return false;
  const auto s = record.find("step");
  return s != record.end() && s->is_number_integer() && s->get<int64_t>() <= step;
}

}  // namespace

MetricsLog MetricsLog::continueAfter(const std::string& path, int64_t step, WallClock clock) {
  std::string kept;
  std::string problem;
  base::Fd fd = base::openRegularFile(path, problem);  // a FIFO would block the resume
  if (fd.valid()) {
    base::LineReader lines(std::move(fd), path);
    for (base::Line line; lines.next(line);) {
      if (!line.cut && keepAfterResume(line.text, step)) kept += line.text + "\n";
    }
  } else if (problem != base::kNotFound) {
    throw UserError(path + ": " + problem);
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << kept;
    out.flush();
    if (!out) throw std::runtime_error(tmp + ": write failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw std::runtime_error(path + ": cannot replace it with " + tmp + ": " +
                             std::strerror(errno));
  }
  return MetricsLog(path, std::ios::app, std::move(clock));
}

nlohmann::ordered_json MetricsLog::write(const nlohmann::ordered_json& record) {
  nlohmann::ordered_json stamped = record;
  stamped["time"] = clock_();
  // Replace invalid UTF-8 rather than throw: a record is never worth failing a run over.
  out_ << stamped.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
  out_.flush();
  if (!out_) throw std::runtime_error(path_ + ": write failed");
  return stamped;
}

}  // namespace cumulus::metrics
