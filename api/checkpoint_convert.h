#pragma once
// Private: the public Checkpoint as the trainer's CheckpointSnapshot and back, field by field.

#include "checkpoint/checkpoint_snapshot.h"
#include "cumulus/checkpoint.h"

namespace cumulus {

// Moves the tensors' handles and the files' bytes (a Checkpoint's tensors are shared, not copied).
checkpoint::CheckpointSnapshot toSnapshot(Checkpoint&& checkpoint);
Checkpoint fromSnapshot(checkpoint::CheckpointSnapshot&& snapshot);

// What save() fills when the caller left it empty: format_version, framework_version ("cumulus
// X.Y.Z, libtorch A.B.C") and created_unix_ms (the wall clock now).
void fillSaveDefaults(CheckpointState& state);

}  // namespace cumulus
