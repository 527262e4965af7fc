#pragma once
// The fixture of the collectives swept over world sizes (World/Collectives.*). Its TEST_Ps live
// beside the algorithm each one exercises (tree_test.cc, ring_test.cc, communicator_test.cc);
// the suite is instantiated once, in communicator_test.cc.

#include <gtest/gtest.h>

namespace cumulus::comm::testing {

class Collectives : public ::testing::TestWithParam<int> {};

}  // namespace cumulus::comm::testing
