#pragma once
// Which ranks share a host: the layout the two-level all-reduce (hierarchical.h) and the cost
// model's pick (cost_model.h) work from. Built from every rank's host id, as the rendezvous
// collects them (rendezvous.h: collectHostIds).
//
// Hosts are numbered in the order of their lowest rank; a rank's local index is its place, in
// rank order, among the ranks of its host. So with ids {a, a, b, b, a} hosts are {a, b}, ranks
// {0, 1, 4} are local 0, 1, 2 of host 0 and {2, 3} local 0, 1 of host 1 (not uniform).
//
// A pure value: no I/O, copy freely, thread-safe to read.

#include <string>
#include <vector>

namespace cumulus::comm {

class Topology {
 public:
  // One rank on one host.
  Topology();
  // `hostIds[r]` is rank r's host; ids are compared for equality only. Throws
  // std::invalid_argument when the list is empty.
  explicit Topology(const std::vector<std::string>& hostIds);

  int world() const { return static_cast<int>(host_of_.size()); }
  int hosts() const { return static_cast<int>(ranks_on_.size()); }
  int hostOf(int rank) const { return host_of_[static_cast<size_t>(rank)]; }
  int localIndexOf(int rank) const { return local_index_[static_cast<size_t>(rank)]; }
  // The ranks of `host`, ascending (index = local index).
  const std::vector<int>& ranksOn(int host) const { return ranks_on_[static_cast<size_t>(host)]; }
  // Every host holds the same number of ranks.
  bool uniform() const { return uniform_; }
  // Ranks per host when uniform(), else 0.
  int localSize() const { return uniform_ ? static_cast<int>(ranks_on_.front().size()) : 0; }

 private:
  std::vector<int> host_of_;
  std::vector<int> local_index_;
  std::vector<std::vector<int>> ranks_on_;
  bool uniform_ = true;
};

}  // namespace cumulus::comm
