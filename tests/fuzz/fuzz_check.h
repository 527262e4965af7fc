#pragma once
// What a fuzz target does when an invariant fails: print why and abort(), so libFuzzer saves the
// input as a crash (an exception would only say "deadly signal" without the reason).

#include <cstdio>
#include <cstdlib>
#include <string>

namespace cumulus::fuzz {

[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "FUZZ FINDING: %s\n", what.c_str());
  std::abort();
}

inline void check(bool ok, const std::string& what) {
  if (!ok) finding(what);
}

}  // namespace cumulus::fuzz
