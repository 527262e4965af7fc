// Checkpoint <-> trainer::CheckpointSnapshot (api/checkpoint_convert.h); the state through
// checkpoint/checkpoint_state_proto.h.

#include "api/checkpoint_convert.h"

#include <torch/version.h>

#include <chrono>
#include <string>
#include <utility>

#include "checkpoint/checkpoint_state_proto.h"
#include "cumulus/version.h"

namespace cumulus {

checkpoint::CheckpointSnapshot toSnapshot(Checkpoint&& checkpoint) {
  checkpoint::CheckpointSnapshot out;
  out.state = checkpoint::stateToProto(checkpoint.state);
  out.model = std::move(checkpoint.tensors);
  out.optimizer_tensors = std::move(checkpoint.optimizer_tensors);
  out.optimizer_scalars = std::move(checkpoint.optimizer_scalars);
  out.files = std::move(checkpoint.files);
  return out;
}

Checkpoint fromSnapshot(checkpoint::CheckpointSnapshot&& snapshot) {
  Checkpoint out;
  out.state = checkpoint::stateFromProto(snapshot.state);
  out.tensors = std::move(snapshot.model);
  out.optimizer_tensors = std::move(snapshot.optimizer_tensors);
  out.optimizer_scalars = std::move(snapshot.optimizer_scalars);
  out.files = std::move(snapshot.files);
  return out;
}

void fillSaveDefaults(CheckpointState& state) {
  if (state.format_version == 0) state.format_version = checkpoint::kCheckpointFormatVersion;
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
