#include "base/host_port.h"

#include "base/integer.h"

namespace cumulus::base {
namespace {

std::optional<HostPort> fail(std::string* problem, std::string text) {
  if (problem != nullptr) *problem = std::move(text);
  return std::nullopt;
}

}  // namespace

std::optional<HostPort> parseHostPort(std::string_view text, std::string* problem) {
  const std::string quoted = "\"" + std::string(text) + "\"";
  std::string_view host;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close == 1 || close + 1 >= text.size() ||
        text[close + 1] != ':') {
      return fail(problem, "expected [IPv6]:PORT, got " + quoted);
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos || colon == 0) {
      return fail(problem, "expected HOST:PORT, got " + quoted);
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  if (port.empty()) return fail(problem, "expected HOST:PORT, got " + quoted);
  const std::optional<int64_t> number = parseInteger(port, 1, 65535);
  if (!number) return fail(problem, integerProblem(port, 1, 65535));
  return HostPort{std::string(host), static_cast<int>(*number)};
}

}  // namespace cumulus::base
