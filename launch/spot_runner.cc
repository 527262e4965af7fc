#include "launch/spot_runner.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <thread>

#include "base/command_line.h"
#include "base/env_names.h"
#include "base/regular_file.h"
#include "launch/worker_process.h"

namespace cumulus::launch {
namespace {

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double unixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string baseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Splits what a pipe delivers into lines; the tail waits for its newline.
class LineReader {
 public:
  template <typename Fn>
  void feed(const char* data, size_t n, Fn&& onLine) {
    buffer_.append(data, n);
    size_t start = 0;
    for (size_t nl; (nl = buffer_.find('\n', start)) != std::string::npos; start = nl + 1) {
      onLine(buffer_.substr(start, nl - start));
    }
    buffer_.erase(0, start);
  }
  template <typename Fn>
  void flush(Fn&& onLine) {
    if (!buffer_.empty()) onLine(buffer_);
    buffer_.clear();
  }

 private:
  std::string buffer_;
};

}  // namespace

std::vector<std::string> commandFor(const std::vector<std::string>& command, int64_t world_size) {
  if (command.empty()) throw std::invalid_argument("no job command given after --");
  if (world_size <= 0) return command;
  std::vector<std::string> out = command;
  bool placed = false;
  for (std::string& arg : out) {
    for (size_t at; (at = arg.find("{world}")) != std::string::npos;) {
      arg.replace(at, 7, std::to_string(world_size));
      placed = true;
    }
  }
  if (placed) return out;
  if (baseName(command[0]) == "cumulus-run") {
    out.insert(out.begin() + 1, "--nproc-per-node=" + std::to_string(world_size));
    return out;
  }
  throw std::invalid_argument(
      "--world-sizes: the job command is not cumulus-run and has no "
      "{world} placeholder; put {world} where the world size goes");
}

namespace {

// Sends the launch's notice when the trace says (SIGTERM, or the notice file), SIGKILLs it when
// the notice period is over or the whole run's timeout passes. `now`: seconds since the run began.
void applyTrace(WorkerProcess& process, const SpotOptions& options, const SpotLaunch& launch,
                double now, LaunchRecord& record, SpotRun& run) {
  if (!record.notice_s && now - record.start_s >= launch.notice_after_s) {
    record.notice_s = now;
    if (options.notice_file.empty()) {
      ::kill(process.pid(), SIGTERM);
    } else {
      std::ofstream(options.notice_file) << "preempt\n";
    }
  }
  if (record.notice_s && !record.killed && now - *record.notice_s >= options.trace.notice_s) {
    record.killed = true;
    process.signal(SIGKILL);
  }
  if (now >= options.timeout_s && !run.timed_out) {
    run.timed_out = true;
    process.signal(SIGKILL);
  }
}

// Runs one launch to its end: echoes its output line by line, applies the trace, and returns once
// the child has exited and its output is drained.
void superviseLaunch(WorkerProcess& process, const SpotOptions& options, const SpotLaunch& launch,
                     std::chrono::steady_clock::time_point t0, LaunchRecord& record, SpotRun& run) {
  LineReader reader;
  auto onLine = [&](const std::string& line) {
    if (options.echo) {
      *options.echo << "[spot " << record.index << "] " << line << "\n" << std::flush;
    }
  };
  bool open = true;
  while (true) {
    if (open) {
      pollfd fd{process.outputFd(), POLLIN, 0};
      if (::poll(&fd, 1, 20) > 0) {
        char chunk[4096];
        const ssize_t n = ::read(process.outputFd(), chunk, sizeof chunk);
        if (n > 0) {
          reader.feed(chunk, static_cast<size_t>(n), onLine);
        } else if (n == 0) {
          open = false;  // every holder of the pipe's write end is gone
        }
      }
    } else {
      process.waitFor(0.005);  // the output is closed: wake at the exit, or to apply the trace
    }
    const ExitStatus& status = process.poll();
    if (status.exited && !open) break;
    if (status.exited) {
      // Drain what the child wrote before it exited (grandchildren may keep the pipe: bounded).
      pollfd fd{process.outputFd(), POLLIN, 0};
      if (::poll(&fd, 1, 100) <= 0) break;
      continue;
    }
    applyTrace(process, options, launch, secondsSince(t0), record, run);
  }
  reader.flush(onLine);
}

// The launch's records from the metrics file, read once it has ended: they are all there, and the
// next launch may drop some (the steps past its checkpoint).
// A file not written yet has nothing to say; one that is not a regular file (a FIFO would hold
// cumulus-spot in open(2)) is a mistake in --metrics.
void readMetrics(const std::string& path, double start_unix, LaunchRecord& record) {
  if (path.empty()) return;
  std::string problem;
  const std::optional<std::string> text = base::readRegularFile(path, problem);
  if (!text && problem != base::kNotFound) {
    throw base::UsageError("--metrics " + path + ": " + problem);
  }
  observeMetrics(text.value_or(""), start_unix, record);
}

}  // namespace

SpotRun runSpot(const SpotOptions& options) {
  const SpotTrace trace(options.trace);
  const auto t0 = std::chrono::steady_clock::now();
  SpotRun run;
  int64_t crashes = 0;
  for (int64_t i = 0;; ++i) {
    const SpotLaunch launch = trace.launch(i);
    if (!options.notice_file.empty()) ::unlink(options.notice_file.c_str());
    LaunchRecord record;
    record.index = i;
    record.world_size = launch.world_size;
    WorkerProcess process(commandFor(options.command, launch.world_size),
                          {{base::env::kSpotLaunch, std::to_string(i)}});
    record.start_s = secondsSince(t0);
    const double start_unix = unixNow();
    process.start();
    superviseLaunch(process, options, launch, t0, record, run);
    const ExitStatus status = process.poll();
    record.end_s = secondsSince(t0);
    record.exit_code = status.exit_code;
    record.signal = status.signal;
    readMetrics(options.metrics_path, start_unix, record);
    run.records.push_back(record);
    if (run.timed_out) break;
    if (status.ok()) break;  // done (possibly during its notice period)
    if (!record.notice_s && ++crashes > options.max_crashes) break;
    std::this_thread::sleep_for(std::chrono::duration<double>(options.trace.relaunch_delay_s));
  }
  if (!options.notice_file.empty()) ::unlink(options.notice_file.c_str());
  return run;
}

}  // namespace cumulus::launch
