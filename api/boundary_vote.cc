// The two exchanges of an in-place group's members at a boundary that are not the program's: the
// stop agreement's vote and a packed state sent to the members behind (api/elastic_group.h).

#include "api/elastic_group.h"

#include <torch/torch.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>
#include <vector>

#include "cumulus/errors.h"

namespace cumulus {
namespace {

constexpr int64_t kNoticeLevel = 2;  // PreemptionWatcher's proposal 4·step + 2: "I got a notice"
// A size announced for a state that no process could hold: refused before allocating it.
constexpr int64_t kMaxStateBytes = int64_t{1} << 46;

}  // namespace

std::string broadcastPacked(ProcessGroup& group, int source, const std::string& packed) {
  const bool sending = group.rank() == source;
  torch::Tensor size = torch::full({1}, static_cast<int64_t>(packed.size()), torch::kInt64);
  group.broadcast(size, source);
  const int64_t bytes = size[0].item<int64_t>();
  if (bytes < 0 || bytes > kMaxStateBytes) {
    throw CheckpointError("the state sent by rank " + std::to_string(source) + ": announced " +
                          std::to_string(bytes) + " bytes");
  }
  // int64 words, the unit broadcast moves; the last one zero-padded.
  torch::Tensor words = torch::zeros({(bytes + 7) / 8}, torch::kInt64);
  if (sending) std::memcpy(words.data_ptr(), packed.data(), packed.size());
  group.broadcast(words, source);
  if (sending) return packed;
  return std::string(static_cast<const char*>(words.data_ptr()), static_cast<size_t>(bytes));
}

std::vector<int> BoundaryVote::noticed() const {
  std::vector<int> ranks;
  for (size_t r = 0; r < proposals.size(); ++r) {
    if (proposals[r] >= 0 && proposals[r] % 4 == kNoticeLevel) ranks.push_back(static_cast<int>(r));
  }
  return ranks;
}

BoundaryVote voteAtBoundary(ProcessGroup& group, int64_t proposal, bool joiners_waiting) {
  const int64_t mine[2] = {proposal, joiners_waiting ? 1 : 0};
  const torch::Tensor all =
      group.allgather(torch::tensor(std::vector<int64_t>(mine, mine + 2), torch::kInt64))
          .contiguous();
  const int64_t* v = all.data_ptr<int64_t>();
  BoundaryVote vote;
  vote.max = INT64_MIN;
  for (int64_t r = 0; r < all.size(0); ++r) {
    vote.proposals.push_back(v[2 * r]);
    vote.max = std::max(vote.max, v[2 * r]);
    vote.joiners_waiting = vote.joiners_waiting || v[2 * r + 1] > 0;
  }
  return vote;
}

}  // namespace cumulus
