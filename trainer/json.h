#pragma once
// JSON text helpers shared by metrics.jsonl and the Chrome trace. Pure functions; thread-safe.

#include <string>

namespace cumulus::trainer {

// JSON string literal with the quotes, escaping quotes, backslashes and control characters.
std::string jsonQuote(const std::string& text);

}  // namespace cumulus::trainer
