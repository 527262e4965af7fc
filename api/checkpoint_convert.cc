// Checkpoint <-> trainer::CheckpointSnapshot (api/checkpoint_convert.h).

#include "api/checkpoint_convert.h"

#include <torch/version.h>

#include <chrono>
#include <string>
#include <utility>

#include "cumulus/version.h"

namespace cumulus {

proto::CheckpointState toProto(const CheckpointState& state) {
  proto::CheckpointState out;
  out.set_step(state.step);
  out.set_epoch(state.epoch);
  out.set_sampler_cursor(state.sampler_cursor);
  out.set_seed(state.seed);
  out.set_rng_state(state.rng_state);
  out.set_config_digest(state.config_digest);
  out.set_config_yaml(state.config_yaml);
  out.set_world_size(state.world_size);
  out.set_global_batch(state.global_batch);
  out.set_samples_seen(state.samples_seen);
  out.set_grad_accumulation(state.grad_accumulation);
  out.set_model(state.model);
  out.set_optimizer(state.optimizer);
  out.set_learning_rate(state.learning_rate);
  out.set_preempted(state.preempted);
  out.set_generation(state.generation);
  out.set_run_id(state.run_id);
  out.set_format_version(state.format_version);
  out.set_framework_version(state.framework_version);
  out.set_created_unix_ms(state.created_unix_ms);
  return out;
}

CheckpointState fromProto(const proto::CheckpointState& state) {
  CheckpointState out;
  out.step = state.step();
  out.epoch = state.epoch();
  out.sampler_cursor = state.sampler_cursor();
  out.seed = state.seed();
  out.rng_state = state.rng_state();
  out.config_digest = state.config_digest();
  out.config_yaml = state.config_yaml();
  out.world_size = state.world_size();
  out.global_batch = state.global_batch();
  out.samples_seen = state.samples_seen();
  out.grad_accumulation = state.grad_accumulation();
  out.model = state.model();
  out.optimizer = state.optimizer();
  out.learning_rate = state.learning_rate();
  out.preempted = state.preempted();
  out.generation = state.generation();
  out.run_id = state.run_id();
  out.format_version = state.format_version();
  out.framework_version = state.framework_version();
  out.created_unix_ms = state.created_unix_ms();
  return out;
}

trainer::CheckpointSnapshot toSnapshot(Checkpoint&& checkpoint) {
  trainer::CheckpointSnapshot out;
  out.state = toProto(checkpoint.state);
  out.model = std::move(checkpoint.tensors);
  out.optimizer_tensors = std::move(checkpoint.optimizer_tensors);
  out.optimizer_scalars = std::move(checkpoint.optimizer_scalars);
  out.files = std::move(checkpoint.files);
  return out;
}

Checkpoint fromSnapshot(trainer::CheckpointSnapshot&& snapshot) {
  Checkpoint out;
  out.state = fromProto(snapshot.state);
  out.tensors = std::move(snapshot.model);
  out.optimizer_tensors = std::move(snapshot.optimizer_tensors);
  out.optimizer_scalars = std::move(snapshot.optimizer_scalars);
  out.files = std::move(snapshot.files);
  return out;
}

void fillSaveDefaults(CheckpointState& state) {
  if (state.format_version == 0) state.format_version = trainer::kCheckpointFormatVersion;
  if (state.framework_version.empty()) {
    state.framework_version = std::string("cumulus ") + version() + ", libtorch " TORCH_VERSION;
  }
  if (state.created_unix_ms == 0) {
    state.created_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
  }
}

}  // namespace cumulus
