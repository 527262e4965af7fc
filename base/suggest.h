#pragma once
// "Did you mean ...?" for unknown keys, flags and choices.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace cumulus::base {

// Optimal-string-alignment distance: insertions, deletions, substitutions and swaps of two
// neighbouring characters each cost 1 ("lr" -> "rl" is 1).
size_t editDistance(std::string_view a, std::string_view b);

// Whether `candidate` is a plausible intended spelling of `word`: a small edit distance relative
// to the length, or one is a prefix of the other (at least 3 characters long).
bool isCloseSpelling(std::string_view word, std::string_view candidate);

// The closest plausible candidate, or "" when none is close. Ties go to the earlier candidate.
std::string closestSpelling(std::string_view word, const std::vector<std::string>& candidates);

// "`a`", "`a` or `b`", "`a`, `b` or `c`".
std::string orList(const std::vector<std::string>& items);

}  // namespace cumulus::base
