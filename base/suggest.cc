#include "base/suggest.h"

#include <algorithm>

namespace cumulus::base {

size_t editDistance(std::string_view a, std::string_view b) {
  // Three rolling rows of the usual dynamic programme; the extra row lets a swap look back two.
  std::vector<size_t> before(b.size() + 1), previous(b.size() + 1), current(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        current[j] = std::min(current[j], before[j - 2] + 1);
      }
    }
    std::swap(before, previous);
    std::swap(previous, current);
  }
  return previous[b.size()];
}

bool isCloseSpelling(std::string_view word, std::string_view candidate) {
  if (word.empty() || candidate.empty()) return false;
  size_t shorter = std::min(word.size(), candidate.size());
  size_t longer = std::max(word.size(), candidate.size());
  if (shorter >= 3 &&
      (candidate.substr(0, word.size()) == word || word.substr(0, candidate.size()) == candidate)) {
    return true;
  }
  size_t distance = editDistance(word, candidate);
  // Up to a third of the longer word, at least 2, but never all of it ("xy" is not "lr").
  size_t allowed = std::max<size_t>(2, longer / 3);
  return distance <= allowed && distance < longer && distance < shorter + 1;
}

std::string closestSpelling(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const std::string& candidate : candidates) {
    if (!isCloseSpelling(word, candidate)) continue;
    size_t distance = editDistance(word, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  return best;
}

std::string orList(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += i + 1 == items.size() ? " or " : ", ";
    out += "`" + items[i] + "`";
  }
  return out;
}

}  // namespace cumulus::base
