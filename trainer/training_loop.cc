// The training loop: steps, progress and metrics records, evaluation, checkpoints on their
// schedule and at an agreed preemption step, and the run's final outputs.
#include "trainer/trainer_impl.h"

#include <torch/torch.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <ostream>
#include <sstream>

#include "comm/communicator.h"
#include "configs/parse.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "models/model.h"
#include "trainer/checkpoint.h"
#include "trainer/checkpoint_schedule.h"
#include "trainer/distributed_sync.h"
#include "trainer/gradient_sync.h"
#include "trainer/metrics.h"
#include "trainer/optimizer.h"
#include "trainer/preemption.h"
#include "trainer/process_group.h"
#include "trainer/progress.h"
#include "trainer/resume.h"
#include "trainer/schedule.h"
#include "trainer/startup_profile.h"
#include "trainer/state_dict.h"
#include "trainer/trace.h"
#include "trainer/training_checkpoint.h"
namespace cumulus::trainer {
namespace {

// The steps since the last train record: console and metrics show their mean loss, because one
// step's loss is too noisy to read, and their throughput, training time only (no evaluation).
struct StepWindow {
  double loss = 0;
  double seconds = 0;
  double comm_wait = 0;  // of `seconds`, blocked waiting for the gradient all-reduce
  int64_t steps = 0;
  int64_t samples = 0;

  void add(double step_loss, double step_seconds, double step_comm_wait, int64_t step_samples) {
    loss += step_loss;
    seconds += step_seconds;
    comm_wait += step_comm_wait;
    samples += step_samples;
    ++steps;
  }
  double meanLoss() const { return steps > 0 ? loss / static_cast<double>(steps) : 0; }
  double samplesPerSec() const { return seconds > 0 ? static_cast<double>(samples) / seconds : 0; }
  double stepTimeMs() const {
    return steps > 0 ? 1000.0 * seconds / static_cast<double>(steps) : 0;
  }
  double commWaitMs() const {
    return steps > 0 ? 1000.0 * comm_wait / static_cast<double>(steps) : 0;
  }
};

std::string formatEpochs(double epochs) {
  char text[32];
  if (std::fabs(epochs - std::round(epochs)) < 1e-9) {
    std::snprintf(text, sizeof(text), "%.0f", epochs);
  } else {
    std::snprintf(text, sizeof(text), "%.2f", epochs);
  }
  return text;
}

// CUMULUS_FAULT_SIGTERM_AT_STEP=S[:R]: a test hook that makes rank R (every rank without :R)
// raise a real SIGTERM at itself after step S, so a stop lands at a chosen step. -1: unset.
int64_t faultSigtermStep(int64_t rank) {
  const char* text = std::getenv("CUMULUS_FAULT_SIGTERM_AT_STEP");
  if (text == nullptr || *text == 0) return -1;
  char* end = nullptr;
  const long long step = std::strtoll(text, &end, 10);
  if (*end == ':' && std::strtoll(end + 1, nullptr, 10) != rank) return -1;
  return step;
}

}  // namespace

std::pair<double, double> Trainer::Impl::evaluate() {
  TraceRecorder::Span span(options.trace, "evaluate");
  torch::NoGradGuard no_grad;
  model->train(false);
  const int64_t n = data.test.size();
  // Without a group (a test driving one rank by hand) this rank evaluates everything.
  const int64_t shards = comm != nullptr ? env.world_size : 1;
  const int64_t shard = comm != nullptr ? env.rank : 0;
  const int64_t first = n * shard / shards;
  const int64_t last = n * (shard + 1) / shards;
  double loss_sum = 0;
  int64_t correct = 0;
  for (int64_t begin = first; begin < last; begin += config.eval.batch_size) {
    const int64_t rows = std::min(config.eval.batch_size, last - begin);
    const torch::Tensor images = data.test.images.narrow(0, begin, rows);
    const torch::Tensor labels = data.test.labels.narrow(0, begin, rows);
    const torch::Tensor logits = model->forward(images);
    loss_sum +=
        torch::nn::functional::cross_entropy(
            logits, labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
            .item<double>();
    correct += logits.argmax(1).eq(labels).sum().item<int64_t>();
  }
  if (comm != nullptr) {
    // Counts are integers far below 2^53, so the float64 sum is exact.
    double sums[2] = {loss_sum, static_cast<double>(correct)};
    comm::Buffer buffer{sums, 2, comm::DType::kFloat64};
    comm::AllreduceOptions op;
    op.algorithm = comm::Algorithm::kTree;  // fixed: the loss sum is bit-identical across runs
    comm->allreduce(buffer, op);
    loss_sum = sums[0];
    correct = static_cast<int64_t>(sums[1]);
  }
  model->train(true);
  return {loss_sum / static_cast<double>(n), static_cast<double>(correct) / static_cast<double>(n)};
}

std::unique_ptr<MetricsLog> Trainer::Impl::openRunDir() {
  if (!writes()) return nullptr;
  const std::string& dir = config.trainer.run_dir;
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error)
    throw std::runtime_error(dir + ": cannot create the run directory: " + error.message());
  std::ofstream yaml(dir + "/config.yaml", std::ios::trunc);
  yaml << configs::toYaml(config);
  if (!yaml) throw std::runtime_error(dir + "/config.yaml: write failed");
  // One metrics.jsonl for the whole run: a resumed launch continues the file, dropping the
  // records of the steps it runs again.
  const std::string path = dir + "/metrics.jsonl";
  if (start_step == 0) return std::make_unique<MetricsLog>(path);
  auto log = std::make_unique<MetricsLog>(MetricsLog::continueAfter(path, start_step));
  log->write(nlohmann::ordered_json{
      {"type", "resume"}, {"step", start_step}, {"world_size", env.world_size}});
  return log;
}

std::pair<double, double> Trainer::Impl::evaluateAndReport(int64_t step, int64_t epoch,
                                                           Progress& progress,
                                                           MetricsLog* metrics) {
  const auto [loss, accuracy] = evaluate();
  char text[160];
  std::snprintf(text, sizeof(text),
                "eval  epoch %lld  step %lld  test_loss %.4f  test_accuracy %.4f",
                static_cast<long long>(epoch), static_cast<long long>(step), loss, accuracy);
  progress.info(text);
  if (metrics != nullptr) {
    metrics->write(nlohmann::ordered_json{{"type", "eval"},
                                          {"step", step},
                                          {"epoch", epoch},
                                          {"test_loss", loss},
                                          {"test_accuracy", accuracy}});
  }
  return {loss, accuracy};
}

void Trainer::Impl::writeFinalOutputs(const RunResult& result, MetricsLog& metrics) {
  auto tensors = model->namedParameters();
  for (auto& buffer : model->namedBuffers()) tensors.push_back(std::move(buffer));
  saveStateDict(tensors, config.trainer.run_dir + "/model_state_dict.pt");
  metrics.write(nlohmann::ordered_json{{"type", "summary"},
                                       {"steps", result.steps},
                                       {"epochs", result.epochs},
                                       {"test_loss", result.test_loss},
                                       {"test_accuracy", result.test_accuracy},
                                       {"wall_seconds", result.seconds},
                                       {"parameters", model->parameterCount()},
                                       {"world_size", env.world_size}});
}

RunResult Trainer::Impl::run() {
  const auto& t = config.trainer;
  std::ostringstream discard;
  std::ostream& console = options.console != nullptr ? *options.console : discard;
  const int64_t steps_per_epoch = sampler->stepsPerEpoch();
  const int64_t epochs = (total_steps + steps_per_epoch - 1) / steps_per_epoch;
  Progress progress(console, options.live_progress, total_steps, epochs, t.log_every_steps,
                    Progress::quietFor(env.rank, t.log_all_ranks));
  const std::unique_ptr<MetricsLog> metrics = openRunDir();
  progress.info("model: " + model->summary());
  for (const std::string& line : resume_lines) progress.info(line);

  // Step boundaries (DESIGN.md "Training step" 4): a checkpoint when one is due, written by rank 0
  // alone (the replicas are identical) in the background; a stop when the ranks agree on one.
  PreemptionOptions stop_options;
  stop_options.grace_seconds = options.preemption_grace;
  stop_options.watch_sigterm = options.watch_sigterm;
  stop_options.watch_sigusr1 = options.watch_sigterm;
  PreemptionWatcher watcher([this](int64_t v) { return maxOverRanks(v); }, stop_options);
  watcher.startWatchdog();
  CheckpointSchedule due(config.checkpoint.every_steps, config.checkpoint.every_seconds,
                         options.clock);
  const bool saves = writes();
  std::map<int64_t, double> stall_ms;  // step -> the training thread's pause for its checkpoint
  int64_t saved_step = -1;             // the newest step handed to the checkpoint manager
  auto reportSaves = [&] {
    for (const SaveResult& r : checkpoints->takeCompleted()) {
      char text[320];
      std::snprintf(
          text, sizeof(text),
          "checkpoint step %llu: %s (stall %.2f ms, encode %.3f s, write %.3f s, %.1f MB)",
          static_cast<unsigned long long>(r.step), r.path.c_str(),
          stall_ms[static_cast<int64_t>(r.step)], r.encode_seconds, r.write_seconds,
          static_cast<double>(r.bytes) / 1e6);
      progress.info(text);
      if (metrics) {
        metrics->write(nlohmann::ordered_json{{"type", "checkpoint"},
                                              {"step", r.step},
                                              {"stall_ms", stall_ms[static_cast<int64_t>(r.step)]},
                                              {"path", r.path}});
      }
      for (const auto& w : r.warnings) progress.line("warning: " + w.str());
    }
  };
  const int64_t fault_step = faultSigtermStep(env.rank);

  RunResult result;
  result.first_step = start_step;
  const double start = now();
  StepWindow window;
  std::pair<double, double> eval{0, 0};
  for (int64_t s = start_step; s < total_steps; ++s) {
    const int64_t epoch = sampler->state().epoch + 1;  // 1-based, for people
    const auto samples = static_cast<int64_t>(sampler->globalBatch().size());
    const double lr = schedule->lr(s);
    const double step_start = now();
    const double loss = trainStep(s);
    window.add(loss, now() - step_start, last_comm_wait, samples);
    result.step_losses.push_back(loss);
    const int64_t done = s + 1;
    samples_seen += static_cast<uint64_t>(samples);
    if (s == start_step) {
      std::string text = "first step " + std::to_string(done) + " completed";
      nlohmann::ordered_json first{{"type", "first_step"}, {"step", done}};
      if (options.startup) {
        options.startup->mark("step");
        text += ", " + options.startup->summary();
        first["seconds_since_exec"] = options.startup->totalSeconds();
      }
      progress.info(text);
      if (metrics) metrics->write(first);
    }

    const bool record = done == 1 || done == total_steps ||
                        (t.log_every_steps > 0 && done % t.log_every_steps == 0);
    // Each rank's loss is its share of the global mean: records show the sum over ranks (one
    // small all-reduce per record, not per step); a live line in between scales the local share.
    if (record && comm != nullptr) window.loss = sumOverRanks(window.loss);
    const double shown_loss =
        window.meanLoss() * (record || comm == nullptr ? 1.0 : static_cast<double>(env.world_size));
    progress.update({done, epoch, shown_loss, window.samplesPerSec(), now() - start});
    if (record) {
      if (metrics) {
        metrics->write(
            nlohmann::ordered_json{{"type", "train"},
                                   {"step", done},
                                   {"epoch", epoch},
                                   {"loss", shown_loss},
                                   {"lr", lr},
                                   {"samples_per_sec", window.samplesPerSec()},
                                   {"step_time_ms", window.stepTimeMs()},
                                   {"compute_ms", window.stepTimeMs() - window.commWaitMs()},
                                   {"comm_wait_ms", window.commWaitMs()}});
      }
      window = StepWindow();
    }
    const bool eval_due = config.eval.every_steps > 0 ? done % config.eval.every_steps == 0
                                                      : done % steps_per_epoch == 0;
    if (eval_due || done == total_steps)
      eval = evaluateAndReport(done, epoch, progress, metrics.get());

    // The last step is always checkpointed when checkpoints are on, so a finished run can be
    // extended (more steps, --allow-config-change) from its end, optimizer state included.
    const bool last = done == total_steps;
    if (!last && done == fault_step) ::raise(SIGTERM);
    auto saveAndGoOn = [&] {
      const double pause = now();
      try {
        CheckpointSnapshot snap = snapshot(done, lr, false);
        if (config.checkpoint.async) {
          checkpoints->saveAsync(std::move(snap));
        } else {
          checkpoints->save(snap);  // reported by takeCompleted like a background one
        }
        saved_step = done;
      } catch (const CheckpointError& e) {
        // The previous checkpoint stays the newest valid one; training goes on.
        progress.line(std::string("warning: checkpoint failed: ") + e.what());
      }
      stall_ms[done] = 1000.0 * (now() - pause);
      due.markSaved();
    };
    if (saves && due.enabled() && (last || due.due(done))) saveAndGoOn();
    reportSaves();
    if (last) break;
    const StepAction action = watcher.decide(done);
    if (action == StepAction::kCheckpoint) {
      // A rebalance recommendation: the instance may go soon, so save now, then train on.
      progress.info("checkpoint requested at step " + std::to_string(done) + "; training goes on");
      if (saves && saved_step != done) saveAndGoOn();
      reportSaves();
    }
    if (action == StepAction::kStop) {
      const std::string path = checkpointDir() + "/" + CheckpointManager::dirName(done);
      if (saves) {
        if (saved_step == done) {
          checkpoints->waitForPending();
        } else {
          const double pause = now();
          checkpoints->save(snapshot(done, lr, true));
          stall_ms[done] = 1000.0 * (now() - pause);
        }
        reportSaves();
      }
      maxOverRanks(0);  // no rank exits before rank 0's checkpoint is durable
      result.preempted = true;
      result.steps = done;
      result.checkpoint = path;
      progress.line("preempted at step " + std::to_string(done) + ", checkpoint " + path);
      if (metrics) {
        metrics->write(
            nlohmann::ordered_json{{"type", "preempted"}, {"step", done}, {"checkpoint", path}});
      }
      break;
    }
  }
  progress.finish();
  if (saves) {
    checkpoints->waitForPending();
    reportSaves();
  }
  {
    const int64_t ran = (result.preempted ? result.steps : total_steps) - start_step;
    char text[96];
    const double seconds = now() - start;
    std::snprintf(text, sizeof(text), "trained %lld steps in %.3f s", static_cast<long long>(ran),
                  seconds);
    progress.info(text);
    if (metrics) {
      metrics->write(nlohmann::ordered_json{
          {"type", "trained"}, {"step", start_step + ran}, {"steps", ran}, {"seconds", seconds}});
    }
  }
  if (result.preempted) {
    result.seconds = now() - start;
    return result;
  }

  result.test_loss = eval.first;
  result.test_accuracy = eval.second;
  result.steps = total_steps;
  result.epochs = static_cast<double>(total_steps) / static_cast<double>(steps_per_epoch);
  result.seconds = now() - start;
  if (metrics) writeFinalOutputs(result, *metrics);
  if (env.rank == 0) {
    result.parameter_digest = parameterDigest(*model);
    progress.info("final parameters sha256 " + result.parameter_digest);
  }
  char text[200];
  std::snprintf(text, sizeof(text),
                "test accuracy %.4f (loss %.4f) after %s epochs, %lld steps, %.1f s",
                result.test_accuracy, result.test_loss, formatEpochs(result.epochs).c_str(),
                static_cast<long long>(result.steps), result.seconds);
  progress.info(text);
  return result;
}

}  // namespace cumulus::trainer
