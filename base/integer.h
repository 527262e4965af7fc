#pragma once
// The one strict integer reader, for every number that arrives as text: a flag, an environment
// variable, a Slurm node list, a port. Accepted: an optional '-' then decimal digits, nothing else
// (no '+', no spaces, no "0x", no "1e3"), within [min, max]. No LibTorch, no exceptions: each
// caller words its own error, which names the flag or variable and the allowed range.

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

namespace cumulus::base {

std::optional<int64_t> parseInteger(std::string_view text,
                                    int64_t min = std::numeric_limits<int64_t>::min(),
                                    int64_t max = std::numeric_limits<int64_t>::max());

// The same for an unsigned value (a size, a seed): decimal digits only, no '-', at most `max`.
std::optional<uint64_t> parseUnsigned(std::string_view text,
                                      uint64_t max = std::numeric_limits<uint64_t>::max());

// "expected an integer in [min, max], got \"text\"": the words every caller's error uses.
std::string integerProblem(std::string_view text, int64_t min, int64_t max);

}  // namespace cumulus::base
