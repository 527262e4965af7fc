// One LibTorch in the process, the torch wheel's (cmake/torch.cmake), beside Debian's gRPC and
// protobuf, and both working: the wheel's LibTorch and Debian's libraries are built separately, so
// a clash (two libtorch_cpu.so, a symbol resolved to the wrong library) would show here first.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <set>
#include <string>

#include "proto/checkpoint.pb.h"

namespace {

std::set<std::string> mappedLibraries() {
  std::set<std::string> paths;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const size_t slash = line.find('/');
    if (slash != std::string::npos && line.find(".so", slash) != std::string::npos) {
      paths.insert(line.substr(slash));
    }
  }
  return paths;
}

std::string baseName(const std::string& path) { return path.substr(path.rfind('/') + 1); }

TEST(Libraries, OneLibTorchTheWheelsBesideDebiansGrpcAndProtobuf) {
  // Both at work: a tensor operation and a protobuf round trip.
  EXPECT_EQ(torch::arange(1, 5, torch::kFloat32).sum().item<float>(), 10.0f);
  cumulus::proto::CheckpointState state;
  state.set_step(42);
  cumulus::proto::CheckpointState back;
  ASSERT_TRUE(back.ParseFromString(state.SerializeAsString()));
  EXPECT_EQ(back.step(), 42);

  const std::string torch_lib = CUMULUS_TORCH_LIB_DIR "/";
  int torch_cpu = 0, grpc = 0, protobuf = 0;
  for (const std::string& path : mappedLibraries()) {
    const std::string name = baseName(path);
    if (name.rfind("libtorch", 0) == 0 || name.rfind("libc10", 0) == 0) {
      EXPECT_EQ(path.rfind(torch_lib, 0), 0u) << path << " is not the wheel's (" << torch_lib << ")";
      torch_cpu += name == "libtorch_cpu.so";
    }
    if (name.rfind("libgrpc++.so", 0) == 0) {
      ++grpc;
      EXPECT_EQ(path.rfind("/usr/lib/", 0), 0u) << path;
    }
    if (name.rfind("libprotobuf.so", 0) == 0) {
      ++protobuf;
      EXPECT_EQ(path.rfind("/usr/lib/", 0), 0u) << path;
    }
  }
  EXPECT_EQ(torch_cpu, 1);
  EXPECT_EQ(grpc, 1);
  EXPECT_EQ(protobuf, 1);
}

}  // namespace
