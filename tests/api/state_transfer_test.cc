// The live state transfer of recovery in place (broadcastPacked, then unpackCheckpoint), over a
// real group of three ranks as threads: what arrives is byte for byte what the sender packed, a
// pack changed on its way is refused naming the sender and the file, and a size no process could
// hold is refused before anything is allocated, leaving the group usable.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "api/elastic_group.h"
#include "cumulus/checkpoint.h"
#include "cumulus/errors.h"
#include "ranks.h"

namespace cumulus {
namespace {

// The same checkpoint on every rank: a module's tensors, a position, and a file whose length is
// not a multiple of the 8-byte words the broadcast moves.
Checkpoint sharedState(const torch::nn::Linear& net) {
  Checkpoint c;
  c.state.step = 41;
  c.state.samples_seen = 41 * 64;
  c.setSampler({2, 128});
  c.addModule(*net);
  std::string blob(1001, '\0');
  for (size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<char>(i * 37 + 11);
  c.files["blob.bin"] = blob;
  return c;
}

torch::nn::Linear seededNet() {
  torch::manual_seed(7);
  return torch::nn::Linear(5, 3);
}

TEST(StateTransfer, EveryMemberGetsTheSendersBytesAndDecodesThem) {
  const torch::nn::Linear original = seededNet();
  const Checkpoint state = sharedState(original);
  const std::string packed = packCheckpoint(state);
  ASSERT_NE(packed.size() % 8, 0u);  // the last word is padded
  testing::runRanks(3, [&](ProcessGroup& group) {
    const std::string arrived = broadcastPacked(group, 1, group.rank() == 1 ? packed : "");
    EXPECT_EQ(arrived, packed) << "rank " << group.rank();
    const Checkpoint got = unpackCheckpoint(arrived, "the state sent by rank 1");
    EXPECT_EQ(got.state.step, 41u);
    EXPECT_EQ(got.sampler(), (SamplerState{2, 128}));
    EXPECT_EQ(got.files.at("blob.bin"), state.files.at("blob.bin"));
    torch::nn::Linear other(5, 3);
    {
      torch::NoGradGuard no_grad;
      other->weight.fill_(0);
      other->bias.fill_(0);
    }
    got.restoreModule(*other);
    EXPECT_TRUE(torch::equal(other->weight, original->weight));
    EXPECT_TRUE(torch::equal(other->bias, original->bias));
  });
}

TEST(StateTransfer, APackChangedOnItsWayIsRefusedNamingTheSenderAndTheFile) {
  std::string changed = packCheckpoint(sharedState(seededNet()));
  changed[changed.size() - 1] = static_cast<char>(changed[changed.size() - 1] ^ 0x40);
  testing::runRanks(3, [&](ProcessGroup& group) {
    const std::string arrived = broadcastPacked(group, 0, group.rank() == 0 ? changed : "");
    if (group.rank() == 0) return;
    try {
      unpackCheckpoint(arrived, "the state sent by rank 0");
      ADD_FAILURE() << "rank " << group.rank() << " decoded a changed pack";
    } catch (const CheckpointError& e) {
      // The files follow the MANIFEST by name: blob.bin, model.pt, state.pb; the last is changed.
      EXPECT_STREQ(e.what(),
                   "the state sent by rank 0: state.pb: SHA-256 mismatch (corrupt: changed in "
                   "transit)");
    }
  });
}

TEST(StateTransfer, ASizeNoProcessCouldHoldIsRefusedBeforeAllocatingAndTheGroupGoesOn) {
  for (const int64_t announced : {int64_t{1} << 50, int64_t{-8}}) {
    testing::runRanks(3, [&](ProcessGroup& group) {
      if (group.rank() == 2) {
        // A hostile or broken sender: the size broadcast alone, with a size of its own.
        torch::Tensor size = torch::full({1}, announced, torch::kInt64);
        group.broadcast(size, 2);
      } else {
        try {
          broadcastPacked(group, 2, "");
          ADD_FAILURE() << "rank " << group.rank() << " accepted " << announced << " bytes";
        } catch (const CheckpointError& e) {
          EXPECT_EQ(std::string(e.what()),
                    "the state sent by rank 2: announced " + std::to_string(announced) + " bytes");
        }
      }
      // Nobody waits on the words that were never sent: the next collective works.
      torch::Tensor one = torch::ones({1});
      group.allreduce(one);
      EXPECT_EQ(one.item<float>(), 3.0f);
    });
  }
}

}  // namespace
}  // namespace cumulus
