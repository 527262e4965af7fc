// checkWorldSize (world_size_check.h): ranks that disagree on the world size say so.
#include "python/world_size_check.h"

#include <algorithm>
#include <string>
#include <vector>

#include "cumulus/errors.h"

namespace cumulus::python {
namespace {

using Clock = std::chrono::steady_clock;

std::string keyOf(const GroupMember& member, int64_t rank) {
  return "cumulus/world_size/g" + std::to_string(member.generation) + "/" + std::to_string(rank);
}

// A rank that found a mismatch says so under this key before it raises.
std::string seenKeyOf(const GroupMember& member, int64_t rank) {
  return "cumulus/world_size_seen/g" + std::to_string(member.generation) + "/" + std::to_string(rank);
}

// How long a rank that found a mismatch waits for the peer to find it too.
constexpr std::chrono::milliseconds kSeenWait{5000};

// What is left of the time to `deadline`, at least 1 ms: a c10d wait of 0 ms waits forever.
std::chrono::milliseconds left(Clock::time_point deadline) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max(ms, std::chrono::milliseconds(1));
}

std::string secondsText(std::chrono::milliseconds timeout) {
  std::string text = std::to_string(timeout.count() / 1000.0);
  text.erase(text.find_last_not_of('0') + 1);  // "10.000000" -> "10."
  if (text.back() == '.') text.pop_back();
  return text;
}

[[noreturn]] void mismatch(int64_t rank_a, const std::string& size_a, int64_t rank_b,
                           const std::string& size_b) {
  const bool a_first = rank_a < rank_b;
  throw GroupError("cumulus backend: rank " + std::to_string(a_first ? rank_a : rank_b) +
                   " was started with world size " + (a_first ? size_a : size_b) + " and rank " +
                   std::to_string(a_first ? rank_b : rank_a) + " with " +
                   (a_first ? size_b : size_a) +
                   ": start every rank with the same world size (WORLD_SIZE, or "
                   "init_process_group's world_size)");
}

}  // namespace

void checkWorldSize(Store& store, const GroupMember& member, Clock::time_point deadline,
                    std::chrono::milliseconds timeout) {
  const std::string mine = std::to_string(member.size);
  store.set(keyOf(member, member.rank), mine);
  for (int64_t peer = 0; peer < member.size; ++peer) {
    if (peer == member.rank) continue;
    std::string theirs;
    try {
      theirs = store.get(keyOf(member, peer), left(deadline));
    } catch (const CommError& e) {
      if (e.kind() != CommErrorKind::kTimeout) throw;
      // Every rank that never published, not only the first: the ones after it may be there.
      std::vector<int64_t> missing;
      for (int64_t other = peer; other < member.size; ++other) {
        if (other != member.rank && !store.tryGet(keyOf(member, other))) missing.push_back(other);
      }
      if (missing.empty()) missing.push_back(peer);
      std::string ranks;
      for (int64_t r : missing) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
      const std::string detail = "rank(s) " + ranks + " of " + mine + " did not join within the " +
                                 secondsText(timeout) + " s timeout of init_process_group";
      throw CommError(CommErrorKind::kRendezvous, "rendezvous", 0, static_cast<int>(missing[0]),
                      detail + " (did they start, all with world size " + mine + "?)");
    }
    if (theirs != mine) {
      // The peer must read this rank's size too, to say the same; when this rank hosts the
      // store (torch's rank 0) it goes away with this process. So: a word that this rank read
      // the peer's, and a short wait for the peer's word that it read this one's.
      store.set(seenKeyOf(member, member.rank), "1");
      try {
        store.get(seenKeyOf(member, peer), std::min(left(deadline), kSeenWait));
      } catch (const CommError&) {
        // It did not say in time (gone, or it reads another first): the mismatch is still ours.
      }
      mismatch(member.rank, mine, peer, theirs);
    }
  }
}

}  // namespace cumulus::python
