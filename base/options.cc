// The one place that names the public option enums (<cumulus/options.h>). Lives in the lowest
// library so that the comm layer, configs and the public API all share it.
#include "cumulus/options.h"

#include <string>
#include <vector>

#include "base/suggest.h"
#include "cumulus/errors.h"

namespace cumulus {
namespace {

constexpr Algorithm kAlgorithms[] = {Algorithm::kFunnel, Algorithm::kTree, Algorithm::kRing,
                                     Algorithm::kHierarchical, Algorithm::kAuto};
constexpr Compression kCompressions[] = {Compression::kNone, Compression::kBf16,
                                         Compression::kInt8};
constexpr Precision kPrecisions[] = {Precision::kFp32, Precision::kBf16, Precision::kAuto};

// Finds `name` among the names of `values`; otherwise throws UserError naming them all.
template <class Enum, size_t N, class NameOf>
Enum parseName(std::string_view name, const Enum (&values)[N], NameOf name_of, const char* what) {
  std::vector<std::string> names;
  for (Enum value : values) {
    if (name == name_of(value)) return value;
    names.emplace_back(name_of(value));
  }
  std::string text = std::string("unknown ") + what + " '" + std::string(name) +
                     "': expected one of ";
  for (size_t i = 0; i < names.size(); ++i) text += (i == 0 ? "" : ", ") + names[i];
  const std::string guess = base::closestSpelling(name, names);
  if (!guess.empty()) text += "; did you mean '" + guess + "'?";
  throw UserError(text);
}

}  // namespace

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

const char* compressionName(Compression compression) {
  switch (compression) {
    case Compression::kNone:
      return "none";
    case Compression::kBf16:
      return "bf16";
    case Compression::kInt8:
      return "int8";
  }
  return "unknown";
}

const char* precisionName(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kBf16:
      return "bf16";
    case Precision::kAuto:
      return "auto";
  }
  return "unknown";
}

Algorithm parseAlgorithm(std::string_view name) {
  return parseName(name, kAlgorithms, algorithmName, "algorithm");
}

Compression parseCompression(std::string_view name) {
  return parseName(name, kCompressions, compressionName, "compression");
}

Precision parsePrecision(std::string_view name) {
  return parseName(name, kPrecisions, precisionName, "precision");
}

}  // namespace cumulus
