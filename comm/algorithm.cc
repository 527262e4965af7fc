#include "comm/algorithm.h"

#include <stdexcept>

namespace cumulus::comm {

const char* algorithmName(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kFunnel:
      return "funnel";
    case Algorithm::kTree:
      return "tree";
    case Algorithm::kRing:
      return "ring";
    case Algorithm::kHierarchical:
      return "hierarchical";
    case Algorithm::kAuto:
      return "auto";
  }
  return "unknown";
}

Algorithm parseAlgorithm(const std::string& name) {
  for (Algorithm a : {Algorithm::kFunnel, Algorithm::kTree, Algorithm::kRing,
                      Algorithm::kHierarchical, Algorithm::kAuto}) {
    if (name == algorithmName(a)) return a;
  }
  throw std::invalid_argument("unknown communication algorithm '" + name +
                              "': expected one of funnel, tree, ring, hierarchical, auto");
}

}  // namespace cumulus::comm
