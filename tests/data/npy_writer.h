#pragma once
// Test helpers: .npy bytes as numpy.save writes them, and a temporary directory to put them in.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace cumulus::data::testing {

// The dict numpy.save writes: "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }".
inline std::string npyDict(const std::string& descr, const std::string& shape,
                           const std::string& fortran_order = "False") {
  return "{'descr': '" + descr + "', 'fortran_order': " + fortran_order + ", 'shape': " + shape +
         ", }";
}

// The magic, version `major`.0, the header length (u16 for 1.0, u32 otherwise) and `dict` padded
// with spaces and a newline so that the data starts at a multiple of 64 bytes, as numpy does.
inline std::string npyHeader(const std::string& dict, int major = 1) {
  const size_t preamble = major == 1 ? 10 : 12;
  std::string text = dict;
  text.append((64 - (preamble + text.size() + 1) % 64) % 64, ' ');
  text += '\n';
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(major);
  out += '\0';
  const auto length = static_cast<uint32_t>(text.size());
  for (size_t i = 0; i < preamble - 8; ++i) out += static_cast<char>((length >> (8 * i)) & 0xff);
  return out + text;
}

template <typename T>
std::string rawBytes(const std::vector<T>& values) {
  std::string bytes(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

template <typename T>
std::string npyBytes(const std::string& descr, const std::string& shape,
                     const std::vector<T>& values, int major = 1) {
  return npyHeader(npyDict(descr, shape), major) + rawBytes(values);
}

// A fresh directory under /tmp, removed with everything in it when the test ends.
class NpyTempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/cumulus-npy-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& bytes) {
    const std::string path = dir_ + "/" + name;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path, std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return path;
  }

  std::string dir_;
};

}  // namespace cumulus::data::testing
