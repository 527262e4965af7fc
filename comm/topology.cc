#include "comm/topology.h"

#include <stdexcept>

namespace cumulus::comm {

Topology::Topology() : host_of_{0}, local_index_{0}, ranks_on_{{0}} {}

Topology::Topology(const std::vector<std::string>& hostIds) {
  if (hostIds.empty()) throw std::invalid_argument("a topology needs at least one rank");
  std::vector<const std::string*> seen;  // host index -> its id
  for (size_t r = 0; r < hostIds.size(); ++r) {
    size_t host = 0;
    while (host < seen.size() && *seen[host] != hostIds[r]) ++host;
    if (host == seen.size()) {
      seen.push_back(&hostIds[r]);
      ranks_on_.emplace_back();
    }
    host_of_.push_back(static_cast<int>(host));
    local_index_.push_back(static_cast<int>(ranks_on_[host].size()));
    ranks_on_[host].push_back(static_cast<int>(r));
  }
  for (const auto& ranks : ranks_on_) uniform_ = uniform_ && ranks.size() == ranks_on_[0].size();
}

}  // namespace cumulus::comm
