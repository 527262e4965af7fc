#include "checkpoint/checkpoint_state_proto.h"

namespace cumulus::checkpoint {

proto::CheckpointState stateToProto(const CheckpointState& state) {
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
  out.set_precision(state.precision);
  out.set_model(state.model);
  out.set_optimizer(state.optimizer);
  out.set_learning_rate(state.learning_rate);
  out.set_preempted(state.preempted);
  out.set_generation(state.generation);
  out.set_run_id(state.run_id);
  out.set_format_version(state.format_version);
  out.set_framework_version(state.framework_version);
  out.set_created_unix_ms(state.created_unix_ms);
  out.mutable_batch_shares()->Add(state.batch_shares.begin(), state.batch_shares.end());
  return out;
}

CheckpointState stateFromProto(const proto::CheckpointState& state) {
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
  out.precision = state.precision();
  out.model = state.model();
  out.optimizer = state.optimizer();
  out.learning_rate = state.learning_rate();
  out.preempted = state.preempted();
  out.generation = state.generation();
  out.run_id = state.run_id();
  out.format_version = state.format_version();
  out.framework_version = state.framework_version();
  out.created_unix_ms = state.created_unix_ms();
  out.batch_shares.assign(state.batch_shares().begin(), state.batch_shares().end());
  return out;
}

}  // namespace cumulus::checkpoint
