#include "base/host_port.h"

#include <gtest/gtest.h>

namespace cumulus::base {
namespace {

TEST(HostPortTest, ParsesNamesAddressesAndBracketedIpv6) {
  EXPECT_EQ(parseHostPort("10.0.0.1:29500"), (HostPort{"10.0.0.1", 29500}));
  EXPECT_EQ(parseHostPort("node-3:1"), (HostPort{"node-3", 1}));
  EXPECT_EQ(parseHostPort("[::1]:1234"), (HostPort{"::1", 1234}));
  EXPECT_EQ(parseHostPort("h:65535"), (HostPort{"h", 65535}));
  // Bare IPv6: split at the last colon.
  EXPECT_EQ(parseHostPort("::1:80"), (HostPort{"::1", 80}));
}

std::string problemOf(std::string_view text) {
  std::string problem = "(none)";
  EXPECT_EQ(parseHostPort(text, &problem), std::nullopt) << text;
  return problem;
}

TEST(HostPortTest, SaysWhatIsWrong) {
  EXPECT_EQ(problemOf("localhost"), "expected HOST:PORT, got \"localhost\"");
  EXPECT_EQ(problemOf(""), "expected HOST:PORT, got \"\"");
  EXPECT_EQ(problemOf(":80"), "expected HOST:PORT, got \":80\"");
  EXPECT_EQ(problemOf("h:"), "expected HOST:PORT, got \"h:\"");
  EXPECT_EQ(problemOf("[::1]"), "expected [IPv6]:PORT, got \"[::1]\"");
  EXPECT_EQ(problemOf("[::1]80"), "expected [IPv6]:PORT, got \"[::1]80\"");
  EXPECT_EQ(problemOf("[]:80"), "expected [IPv6]:PORT, got \"[]:80\"");
  EXPECT_EQ(problemOf("[::1]:"), "expected HOST:PORT, got \"[::1]:\"");
  EXPECT_EQ(problemOf("h:0"), "expected an integer in [1, 65535], got \"0\"");
  EXPECT_EQ(problemOf("h:99999"), "expected an integer in [1, 65535], got \"99999\"");
  EXPECT_EQ(problemOf("h:12x"), "expected an integer in [1, 65535], got \"12x\"");
  EXPECT_EQ(problemOf("h:+80"), "expected an integer in [1, 65535], got \"+80\"");
  EXPECT_EQ(problemOf("h: 80"), "expected an integer in [1, 65535], got \" 80\"");
}

TEST(HostPortTest, ProblemIsOptional) { EXPECT_EQ(parseHostPort("nohost"), std::nullopt); }

}  // namespace
}  // namespace cumulus::base
