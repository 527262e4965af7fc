#pragma once
// JSON text helpers shared by metrics.jsonl, the Chrome trace and the launcher's errors.jsonl.
// Here because configs/ is the one dependency-free library every other folder links. Pure
// functions; thread-safe.

#include <string>

namespace cumulus::configs {

// JSON string literal with the quotes, escaping quotes, backslashes and control characters.
std::string jsonQuote(const std::string& text);

}  // namespace cumulus::configs
