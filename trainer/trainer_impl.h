#pragma once
// The trainer's insides, shared by trainer.cc (set-up, one step, resume) and training_loop.cc
// (the loop, evaluation, checkpoints on schedule and at a preemption, outputs). Not a public
// header: only those two files include it.

#include <torch/torch.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "configs/experiment.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "models/model.h"
#include "trainer/checkpoint.h"
#include "trainer/distributed_sync.h"
#include "trainer/gradient_sync.h"
#include "trainer/metrics.h"
#include "trainer/optimizer.h"
#include "trainer/progress.h"
#include "trainer/schedule.h"
#include "trainer/startup_profile.h"
#include "trainer/trainer.h"
#include "trainer/training_checkpoint.h"

namespace cumulus::trainer {

struct Datasets {
  data::TensorDataset train;
  data::TensorDataset test;
};

struct Trainer::Impl {
  configs::Experiment config;
  RunEnv env;
  TrainerOptions options;
  std::unique_ptr<GradientSync> sync;
  DistributedGradientSync* distributed = nullptr;  // `sync`, when it is one
  comm::Communicator* comm = nullptr;              // options.group's, or null (world of one)
  double last_comm_wait = 0;                       // seconds in sync->finish() of the last step
  Datasets data;
  std::unique_ptr<data::DistributedSampler> sampler;
  std::unique_ptr<models::Model> model;
  std::vector<torch::Tensor> params;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<LrSchedule> schedule;
  int64_t total_steps = 0;
  int64_t grad_accumulation = 1;  // micro-batches per step: the config's, or a resume's (resume.h)
  bool ran = false;
  // Checkpoints and resume (DESIGN.md "Preemption protocol").
  PosixFileSystem fs;
  std::unique_ptr<CheckpointManager> checkpoints;  // rank 0 writes; every rank may read
  int64_t start_step = 0;                          // completed steps this run starts after
  uint64_t samples_seen = 0;                       // global samples consumed so far
  std::vector<std::string> resume_lines;           // printed once the console is up
  std::unique_ptr<std::ofstream> ledger;           // CUMULUS_SAMPLE_LEDGER (tests)
  int64_t ledger_launch = 0;

  double now() const {
    if (options.clock) return options.clock();
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  bool writes() const { return options.write_outputs && env.rank == 0; }
  void startupMark(const char* phase) {
    if (options.startup) options.startup->mark(phase);
  }

  void build();
  void checkModelFitsData();
  double trainStep(int64_t step);
  std::pair<double, double> evaluate();
  double sumOverRanks(double value);    // all ranks call it; needs `comm`
  int64_t maxOverRanks(int64_t value);  // all ranks call it; identity in a world of one
  std::string checkpointDir() const;
  void resumeIfAsked();
  CheckpointSnapshot snapshot(int64_t done, double lr, bool preempted);
  std::unique_ptr<MetricsLog> openRunDir();
  std::pair<double, double> evaluateAndReport(int64_t step, int64_t epoch, Progress& progress,
                                              MetricsLog* metrics);
  void writeFinalOutputs(const RunResult& result, MetricsLog& metrics);
  RunResult run();
};

}  // namespace cumulus::trainer
