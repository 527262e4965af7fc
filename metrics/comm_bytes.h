#pragma once
// The bytes this rank handed to the transport since the launch began, over every group it trained
// in (StepRecord::comm_bytes_sent, recorder.h). A group's count is cumulative over its life (an
// Elastic's across its re-formed connections); the counter keeps what earlier groups sent, and
// holds the total while the membership is one rank (no group). Thread-safety: none (the step
// loop's).

#include <cstdint>

#include "cumulus/process_group.h"

namespace cumulus::metrics {

class CommBytesCounter {
 public:
  // The total so far, reading `group` (null: a membership of one rank, which sends nothing).
  uint64_t total(const cumulus::ProcessGroup* group) {
    if (group != nullptr) {
      if (group != group_) {
        base_ += seen_;
        group_ = group;
      }
      seen_ = group->bytesSent();
    }
    return base_ + seen_;
  }

 private:
  uint64_t base_ = 0;                             // what the groups before group_ sent
  const cumulus::ProcessGroup* group_ = nullptr;  // the group last read
  uint64_t seen_ = 0;                             // group_'s count when last read
};

}  // namespace cumulus::metrics
