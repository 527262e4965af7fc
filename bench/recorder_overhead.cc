// cumulus-recorder-bench: what cumulus::Recorder (<cumulus/recorder.h>) costs an Elastic loop whose
// step takes --step-us of compute (a busy loop on the steady clock, so the step's time does not
// depend on the CPU's speed). Runs the same loop with and without the recorder, alternating, each
// --steps steps --reps times; the recorder writes metrics.jsonl and TensorBoard events to a
// temporary run directory, a train record every --log-every steps and --scalars series of the
// program's own logged every step.
//
//   cumulus-recorder-bench [--steps 20000] [--step-us 300] [--log-every 10] [--scalars 1]
//                          [--tensorboard 1] [--reps 5]
//
// Prints one JSON line: the median wall time per step without and with the recorder (µs), the
// overhead per step (µs) and as a share of the plain step, the median time per step spent inside
// the recorder's calls (the overhead's direct part), and every repetition's pair. A world of
// one: the loss's sum over the members (one 16-byte all-reduce per record) is not in it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <unistd.h>

#include "base/command_line.h"
#include "cumulus/elastic.h"
#include "cumulus/errors.h"
#include "cumulus/recorder.h"

namespace {

using Clock = std::chrono::steady_clock;

const char* const kScalarNames[] = {"grad_norm", "tokens", "throughput", "memory"};

void spin(std::chrono::microseconds duration) {
  const auto until = Clock::now() + duration;
  while (Clock::now() < until) {
  }
}

cumulus::ElasticOptions quietOptions() {
  cumulus::ElasticOptions options;
  options.preemption.grace_seconds = 0;
  options.preemption.watch_sigterm = false;
  options.preemption.watch_sigusr1 = false;
  return options;
}

// One loop's seconds per step, and of them the seconds per step spent inside the recorder's calls
// (the rest of the overhead is what the calls leave behind: caches, the kernel's writeback).
struct LoopTime {
  double per_step = 0;
  double in_calls = 0;
};

// One loop of `steps` steps, with a recorder writing under `dir` or none.
LoopTime loop(long steps, std::chrono::microseconds step, long log_every, long scalars,
              bool tensorboard, const std::filesystem::path* dir) {
  cumulus::Elastic elastic(nullptr, quietOptions());
  elastic.setState({[] { return cumulus::Checkpoint{}; }, [](const cumulus::Checkpoint&) {}, ""});
  std::unique_ptr<cumulus::Recorder> recorder;
  if (dir != nullptr) {
    std::filesystem::remove_all(*dir);
    cumulus::RecorderOptions o;
    o.run_dir = dir->string();
    o.total_steps = steps;
    o.log_every_steps = log_every;
    o.console = nullptr;
    o.tensorboard = tensorboard;
    recorder = std::make_unique<cumulus::Recorder>(elastic, o);
  }
  elastic.start(0);
  const auto started = Clock::now();
  Clock::duration in_calls{};
  while (elastic.step() < steps) {
    elastic.train([&] { spin(step); });
    if (recorder) {
      const auto call = Clock::now();
      cumulus::StepMetrics m;
      m.loss = 1.0 / static_cast<double>(elastic.step());
      m.samples = 32;
      m.lr = 0.1;
      recorder->step(m);
      for (long s = 0; s < scalars; ++s) recorder->scalar(kScalarNames[s], 0.5);
      in_calls += Clock::now() - call;
    }
    if (elastic.step() < steps) elastic.boundary();
  }
  if (recorder) recorder->finish();
  const auto seconds = [&](Clock::duration d) {
    return std::chrono::duration<double>(d).count() / static_cast<double>(steps);
  };
  return {seconds(Clock::now() - started), seconds(in_calls)};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int run(int argc, char** argv) {
  namespace base = cumulus::base;
  CLI::App app{
      "What cumulus::Recorder costs an Elastic loop: the wall time per step with and "
      "without it, median of REPS alternating pairs, in microseconds.",
      "cumulus-recorder-bench"};
  base::setUpCommandLine(app);
  long steps = 20000, step_us = 300, log_every = 10, reps = 5, scalars = 1, tensorboard = 1;
  app.add_option("--steps", steps, "steps of each loop (default 20000)")
      ->transform(base::integerIn(10, 100000000));
  app.add_option("--step-us", step_us, "each step's compute, microseconds (default 300)")
      ->transform(base::integerIn(0, 10000000));
  app.add_option("--log-every", log_every, "steps between train records (default 10)")
      ->transform(base::integerIn(1, 1000000));
  app.add_option("--scalars", scalars, "series of the program's own logged each step (default 1)")
      ->transform(base::integerIn(0, 4));
  app.add_option("--tensorboard", tensorboard, "1: TensorBoard events too (default); 0: none")
      ->transform(base::integerIn(0, 1));
  app.add_option("--reps", reps, "pairs of loops, the median counts (default 5)")
      ->transform(base::integerIn(1, 1000));
  if (!base::parseCommandLine(app, argc, argv)) return 0;
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("cumulus-recorder-bench-" + std::to_string(::getpid()));
  std::vector<double> plain, recorded, in_calls;
  nlohmann::json pairs = nlohmann::json::array();
  loop(steps / 10, std::chrono::microseconds(step_us), log_every, scalars, tensorboard != 0,
       &dir);  // warm-up
  for (long r = 0; r < reps; ++r) {
    const bool recorder_first = r % 2 == 1;
    const auto run = [&](const std::filesystem::path* d) {
      return loop(steps, std::chrono::microseconds(step_us), log_every, scalars, tensorboard != 0,
                  d);
    };
    LoopTime a, b;
    if (recorder_first) b = run(&dir);
    a = run(nullptr);
    if (!recorder_first) b = run(&dir);
    plain.push_back(a.per_step * 1e6);
    recorded.push_back(b.per_step * 1e6);
    in_calls.push_back(b.in_calls * 1e6);
    pairs.push_back({a.per_step * 1e6, b.per_step * 1e6});
  }
  std::filesystem::remove_all(dir);
  const double p = median(plain), q = median(recorded);
  nlohmann::json out{{"steps", steps},
                     {"step_us", step_us},
                     {"log_every", log_every},
                     {"scalars", scalars},
                     {"tensorboard", tensorboard},
                     {"plain_us_per_step", p},
                     {"recorded_us_per_step", q},
                     {"overhead_us_per_step", q - p},
                     {"overhead_share", (q - p) / p},
                     {"in_calls_us_per_step", median(in_calls)},
                     {"pairs_us", pairs}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cumulus-recorder-bench: %s\n", e.what());
    return cumulus::exitCodeFor(e);
  }
}
