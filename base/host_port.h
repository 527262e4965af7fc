#pragma once
// The one parser of "host:port" addresses: "10.0.0.1:29500", "node-3:80", "[::1]:1234" (the
// brackets are removed from the host). A bare IPv6 address without brackets is split at its last
// colon ("::1:80" is host "::1", port 80), as every caller accepted before. Pure; thread-safe.

#include <optional>
#include <string>
#include <string_view>

namespace cumulus::base {

struct HostPort {
  std::string host;
  int port = 0;  // 1-65535

  bool operator==(const HostPort& other) const { return host == other.host && port == other.port; }
};

// Parses `text`. On malformed input returns nullopt and, when `problem` is not null, sets it to
// what was wrong, worded to follow "<what>: ":
//   "expected HOST:PORT, got \"<text>\""                  no colon, or an empty host or port
//   "expected [IPv6]:PORT, got \"<text>\""                "[" without a closing "]:"
//   "expected an integer in [1, 65535], got \"<port>\""    port not decimal digits, or out of range
std::optional<HostPort> parseHostPort(std::string_view text, std::string* problem = nullptr);

}  // namespace cumulus::base
