// The reader of a checkpoint's state.pb: the bytes are parsed as proto::CheckpointState (as
// decodeSnapshot does) and, when they parse, converted (stateFromProto) and planned against the
// current experiment and a world size (trainer/resume.h planResume), which is everything a resume
// does with them besides tensors. The first byte is the current world size (1 to 16). A state whose
// config_yaml is empty gets the current experiment's, so that the fuzzer reaches the checks after
// the config comparison without having to write a whole valid experiment. A ResumeError is the
// expected answer to bad state; anything else is a finding, and so is a plan that resumes at a
// negative step, epoch or cursor, with a cursor the batch does not divide, with a grad_accumulation
// that does not divide the global batch, or with batch shares that are not one non-negative share
// per rank summing to the global batch.

#include <google/protobuf/stubs/logging.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "checkpoint/checkpoint_state_proto.h"
#include "configs/parse.h"
#include "proto/checkpoint.pb.h"
#include "tests/fuzz/fuzz_check.h"
#include "trainer/resume.h"

namespace {

const cumulus::configs::Experiment& currentExperiment() {
  static const cumulus::configs::Experiment experiment = cumulus::configs::parseExperiment(
      "name: fuzz\ntrainer: {global_batch_size: 96, grad_accumulation: 2}\n", "current.yaml");
  return experiment;
}

}  // namespace

// protobuf logs every string field that is not UTF-8; a fuzzer makes millions of them.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int64_t world_size = 1 + data[0] % 16;
  cumulus::proto::CheckpointState state;
  if (!state.ParseFromArray(data + 1, static_cast<int>(size - 1))) return 0;
  const cumulus::configs::Experiment& current = currentExperiment();
  if (state.config_yaml().empty()) state.set_config_yaml(cumulus::configs::toYaml(current));
  try {
    const cumulus::trainer::ResumePlan plan = cumulus::trainer::planResume(
        current, world_size, cumulus::checkpoint::stateFromProto(state), "fuzz/step-00000001",
        true);
    const int64_t batch = current.trainer.global_batch_size;
    cumulus::fuzz::check(plan.step >= 0 && plan.sampler.epoch >= 0 && plan.sampler.cursor >= 0,
                         "a negative step, epoch or cursor");
    cumulus::fuzz::check(plan.sampler.cursor % batch == 0, "cursor not a multiple of the batch");
    cumulus::fuzz::check(plan.grad_accumulation >= 1 && batch % plan.grad_accumulation == 0,
                         "grad_accumulation " + std::to_string(plan.grad_accumulation) +
                             " does not divide the global batch");
    if (!plan.batch_shares.empty()) {
      int64_t sum = 0;
      for (const int64_t share : plan.batch_shares) {
        cumulus::fuzz::check(share >= 0 && share <= batch, "a share outside [0, batch]");
        sum += share;
      }
      cumulus::fuzz::check(
          static_cast<int64_t>(plan.batch_shares.size()) == world_size && sum == batch,
          "shares that are not one per rank summing to the global batch");
    }
  } catch (const cumulus::trainer::ResumeError&) {
  }
  return 0;
}
