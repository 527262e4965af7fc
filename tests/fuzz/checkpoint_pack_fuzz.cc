// A packed checkpoint (checkpoint/checkpoint_manifest.h packCheckpointFiles /
// unpackCheckpointFiles): what a live peer sends when it heals another. The first byte picks how
// the rest is used:
//  - odd: the rest is a packed checkpoint as it arrives. An InvalidCheckpoint is the expected
//    answer to bad input; an accepted one must list the required files, each with the size and
//    hash it arrived with, and packing what was accepted must give a string of the same size.
//  - even: the rest is split at each 0x00 into the bytes of model.pt, optim.pt, state.pb and
//    extra.bin; packing them and unpacking must give them back, and changing any one byte of the
//    pack (the one the next two bytes name) must be refused, never accepted as other files.

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/hash.h"
#include "checkpoint/checkpoint_manifest.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using cumulus::checkpoint::InvalidCheckpoint;
using cumulus::checkpoint::packCheckpointFiles;
using cumulus::checkpoint::unpackCheckpointFiles;
using cumulus::checkpoint::VerifiedCheckpoint;
using cumulus::fuzz::check;

const std::vector<std::string> kRequired = {"model.pt", "optim.pt", "state.pb"};

void arrived(const std::string& packed) {
  VerifiedCheckpoint got;
  try {
    got = unpackCheckpointFiles(packed, kRequired);
  } catch (const InvalidCheckpoint&) {
    return;
  }
  for (const std::string& name : kRequired) check(got.files.count(name) == 1, "missing " + name);
  check(got.unlisted.empty(), "a pack has no unlisted files");
  check(packCheckpointFiles(got.files).size() == packed.size(),
        "the accepted files do not pack to the size that arrived");
}

void roundTrip(const std::string& bytes) {
  std::map<std::string, std::string> files;
  const char* names[] = {"model.pt", "optim.pt", "state.pb", "extra.bin"};
  size_t at = 0;
  size_t used = 0;
  for (const char* name : names) {
    const size_t end = std::min(bytes.find('\0', at), bytes.size());
    files[name] = bytes.substr(std::min(at, bytes.size()), end - std::min(at, bytes.size()));
    at = end + 1;
    used = std::min(at, bytes.size());
  }
  const std::string packed = packCheckpointFiles(files);
  const VerifiedCheckpoint back = unpackCheckpointFiles(packed, kRequired);  // must not throw
  check(back.files == files, "pack then unpack changed the files");
  // Change one byte, where the bytes after the files say.
  uint64_t where = 0;
  for (size_t i = used; i < bytes.size() && i < used + 4; ++i) {
    where = where * 256 + static_cast<uint8_t>(bytes[i]);
  }
  std::string changed = packed;
  changed[where % changed.size()] = static_cast<char>(changed[where % changed.size()] ^ 0x5a);
  try {
    unpackCheckpointFiles(changed, kRequired);
  } catch (const InvalidCheckpoint&) {
    return;
  }
  cumulus::fuzz::finding("a pack with byte " + std::to_string(where % changed.size()) +
                         " changed was accepted");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] % 2 == 1) {
    arrived(rest);
  } else {
    roundTrip(rest);
  }
  return 0;
}
