#include "base/bind_address.h"

#include <gtest/gtest.h>

#include <stdexcept>

#include "launch/options.h"

namespace cumulus::base {
namespace {

TEST(LaunchBindAddress, LoopbackRouteUsesLoopbackSource) {
  EXPECT_EQ(routeSourceAddress("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(routeSourceAddress("127.0.0.53"), "127.0.0.1");
  EXPECT_EQ(routeSourceAddress("localhost").rfind("127.", 0) == 0 ||
                routeSourceAddress("localhost") == "::1",
            true);
}

TEST(LaunchBindAddress, UnresolvableHostIsNamedWithTheFix) {
  try {
    routeSourceAddress("no-such-host.invalid");
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("no-such-host.invalid"), std::string::npos) << what;
    EXPECT_NE(what.find("--bind-host"), std::string::npos) << what;
  }
}

TEST(LaunchOptions, BindHostAndParameterServerFlags) {
  auto o = parseLaunchArgs({"--bind-host", "10.231.0.2", "--parameter-server", "--", "w"});
  EXPECT_EQ(o.bind_host, "10.231.0.2");
  EXPECT_TRUE(o.host_parameter_server);
  EXPECT_TRUE(parseLaunchArgs({"w"}).bind_host.empty());
  EXPECT_FALSE(parseLaunchArgs({"w"}).host_parameter_server);
  try {
    parseLaunchArgs({"--parameter-server=1", "w"});
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "--parameter-server takes no value");
  }
  try {
    parseLaunchArgs({"--bind-host=", "w"});
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "--bind-host: the value is empty; give --bind-host H");
  }
}

}  // namespace
}  // namespace cumulus::base
