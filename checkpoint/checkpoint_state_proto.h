#pragma once
// A checkpoint's state.pb (proto::CheckpointState) as the public CheckpointState
// (<cumulus/checkpoint_state.h>) and back, field by field. No LibTorch: the resume planner and its
// fuzz target use it too.

#include "cumulus/checkpoint_state.h"
#include "proto/checkpoint.pb.h"

namespace cumulus::checkpoint {

proto::CheckpointState stateToProto(const CheckpointState& state);
CheckpointState stateFromProto(const proto::CheckpointState& state);

}  // namespace cumulus::checkpoint
