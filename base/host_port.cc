#include "base/host_port.h"

namespace cumulus::base {
namespace {

std::optional<HostPort> fail(std::string* problem, std::string text) {
  if (problem != nullptr) *problem = std::move(text);
  return std::nullopt;
}

// Decimal digits only (no sign, no spaces), 1-65535; 0 when not a port.
int portOf(std::string_view text) {
  if (text.empty() || text.size() > 5) return 0;
  int port = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return 0;
    port = port * 10 + (c - '0');
  }
  return port <= 65535 ? port : 0;
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
  const int number = portOf(port);
  if (number == 0) {
    return fail(problem, "expected an integer in [1, 65535], got \"" + std::string(port) + "\"");
  }
  return HostPort{std::string(host), number};
}

}  // namespace cumulus::base
