#pragma once
// <cumulus/allocator.h>: the C library's allocator, set for training.
//
// A training step allocates and frees the same large blocks every step: activations, their
// gradients, temporaries of several MB. glibc's malloc gives a block above its mmap threshold
// (128 KiB at start) a mapping of its own and unmaps it on free, so every step pays page faults and
// the kernel's zeroing for memory it gave back a moment before. glibc raises the threshold by
// itself when it sees a large block freed, so whether a program pays depends on the order of its
// first allocations: PyTorch DDP's 25 MB bucket happens to raise it, and a plain loop's
// activations do not (measured in docs/training.md, "The allocator").
//
// useTrainingAllocator() chooses instead of leaving it to chance. Call it first thing in main,
// before threads start; cumulus-train does. It fixes two settings with mallopt:
//   - the mmap threshold at 64 MiB: a block up to that size (a step's activations and
//     temporaries) comes from the heap; a larger one (an evaluation batch's) still gets a mapping
//     of its own, which goes back to the kernel when it is freed;
//   - the trim threshold at 2 GiB: the heap's top goes back to the kernel only when that much of
//     it is free.
// So freed blocks stay in the heap and the next step reuses them. The heap holds the largest
// step's working set and stops growing there; it does not grow without bound. A 1 GiB threshold
// was as fast and kept an evaluation's blocks in the heap too: 41% more resident memory after
// the first evaluation (docs/training.md, "The allocator").
//
// The environment decides first:
//   - CUMULUS_MALLOC=default leaves glibc as it comes;
//   - a GLIBC_TUNABLES that sets any glibc.malloc.* value wins: the user chose;
//   - CUMULUS_MALLOC=training (or unset) applies the settings above.
// Any other CUMULUS_MALLOC is a UserError naming the allowed values. On a C library other than
// glibc nothing changes.
// Thread-safety: call it once, before other threads allocate.

#include <string>

namespace cumulus {

struct AllocatorChoice {
  bool tuned = false;  // the settings above were applied
  std::string text;    // one line for a log: what the allocator does, and why
};

AllocatorChoice useTrainingAllocator();

}  // namespace cumulus
