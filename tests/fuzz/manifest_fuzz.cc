// The checkpoint MANIFEST reader (checkpoint/checkpoint_manifest.h). The first byte picks how the
// rest is used: odd, the rest is a whole MANIFEST; even, it is the body and the harness appends
// the right "end <sha256>" line, so the body's parser is reached without forging a hash. An
// InvalidCheckpoint is the expected answer to bad input. An accepted MANIFEST must survive
// encodeManifest (same entries), and verifyCheckpoint over an in-memory directory holding it must
// answer with InvalidCheckpoint or the verified files, nothing else.

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/hash.h"
#include "checkpoint/checkpoint_manifest.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using cumulus::checkpoint::DirEntry;
using cumulus::checkpoint::FileSystemError;
using cumulus::checkpoint::InvalidCheckpoint;
using cumulus::checkpoint::ManifestEntry;

// One directory in memory; only what verifyCheckpoint calls is implemented.
class OneDirFileSystem : public cumulus::checkpoint::FileSystem {
 public:
  explicit OneDirFileSystem(std::map<std::string, std::string> files) : files_(std::move(files)) {}
  std::string readFile(const std::string& path) override {
    auto it = files_.find(path.substr(path.rfind('/') + 1));
    if (it == files_.end()) throw FileSystemError(path, "open", ENOENT);
    return it->second;
  }
  std::vector<DirEntry> list(const std::string&) override {
    std::vector<DirEntry> out;
    for (const auto& [name, bytes] : files_) out.push_back({name, false});
    return out;
  }
  void writeFile(const std::string& path, std::string_view) override { unused(path); }
  void createDir(const std::string& path) override { unused(path); }
  void rename(const std::string& from, const std::string&) override { unused(from); }
  void exchange(const std::string& a, const std::string&) override { unused(a); }
  void syncDir(const std::string& path) override { unused(path); }
  void removeAll(const std::string& path) override { unused(path); }
  bool exists(const std::string& path) override { return files_.count(path) > 0; }
  uint64_t availableBytes(const std::string& path) override { unused(path); }
  uint64_t usedBytes(const std::string& path) override { unused(path); }

 private:
  [[noreturn]] static void unused(const std::string& path) {
    cumulus::fuzz::finding("verifyCheckpoint modified " + path);
  }
  std::map<std::string, std::string> files_;
};

bool sameEntries(const std::vector<ManifestEntry>& a, const std::vector<ManifestEntry>& b) {
  if (a.size() != b.size()) return false;
  std::map<std::string, std::pair<uint64_t, std::string>> byName;
  for (const ManifestEntry& e : a) byName[e.name] = {e.size, e.sha256};
  for (const ManifestEntry& e : b) {
    auto it = byName.find(e.name);
    if (it == byName.end() || it->second != std::make_pair(e.size, e.sha256)) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] % 2 == 0) text += "end " + cumulus::base::sha256Hex(text) + "\n";
  std::vector<ManifestEntry> entries;
  try {
    entries = cumulus::checkpoint::parseManifest(text);
  } catch (const InvalidCheckpoint&) {
    return 0;
  }
  try {
    const std::string encoded = cumulus::checkpoint::encodeManifest(entries);
    cumulus::fuzz::check(sameEntries(cumulus::checkpoint::parseManifest(encoded), entries),
                         "encodeManifest changed the entries of an accepted MANIFEST:\n" + encoded);
  } catch (const std::exception& e) {
    cumulus::fuzz::finding(std::string("an accepted MANIFEST does not re-encode: ") + e.what());
  }
  // A directory with the MANIFEST and one small file under the first listed name.
  std::map<std::string, std::string> files = {{"MANIFEST", text}};
  if (!entries.empty()) files[entries[0].name] = "cumulus";
  OneDirFileSystem fs(files);
  try {
    const auto verified = cumulus::checkpoint::verifyCheckpoint(fs, "/ckpt", {"state.pb"});
    for (const ManifestEntry& e : entries) {
      cumulus::fuzz::check(verified.files.count(e.name) == 1, "verified without " + e.name);
    }
  } catch (const InvalidCheckpoint&) {
  }
  return 0;
}
