#pragma once
// The MANIFEST of a checkpoint directory and its verification. No LibTorch: a checkpoint is
// checked byte for byte before anything in it is deserialized.
//
// Format (text, '\n' line ends, nothing after the last one):
//   cumulus-checkpoint-manifest 1
//   <sha256 hex> <size in bytes> <file name>        one line per file, sorted by name
//   end <sha256 hex of every byte above this line>
// The last line makes a torn MANIFEST (a crash or a full disk mid-write) detectable: a prefix of
// the file either lacks the "end" line or fails its hash.

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/file_system.h"

namespace cumulus::checkpoint {

inline constexpr int kManifestVersion = 1;
inline constexpr char kManifestName[] = "MANIFEST";

struct ManifestEntry {
  std::string name;  // a plain file name: [A-Za-z0-9._-]+, not "." or ".."
  uint64_t size = 0;
  std::string sha256;  // 64 lower-case hex digits
};

// The step of a committed checkpoint directory's name "step-<digits>" (at most 19 digits), or
// none (a "step-N.tmp", any other name).
std::optional<uint64_t> checkpointDirStep(const std::string& name);
// "step-00001200" (at least 8 digits): checkpointDirStep's inverse.
std::string checkpointDirName(uint64_t step);

// Hash and size of `bytes`, as the MANIFEST line of a file called `name`.
ManifestEntry describeFile(const std::string& name, std::string_view bytes);

// The MANIFEST text for `entries` (sorted by name here). Throws std::invalid_argument on a bad
// or duplicate name.
std::string encodeManifest(std::vector<ManifestEntry> entries);

// Parses MANIFEST text. Throws InvalidCheckpoint with a reason ("torn MANIFEST: ...", "MANIFEST
// line 3: ...") on any deviation from the format; the caller adds the path.
std::vector<ManifestEntry> parseManifest(std::string_view text);

// Why a directory is not a usable checkpoint. what() is the reason alone, without the path.
class InvalidCheckpoint : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The verified content of a checkpoint directory: file name -> bytes, exactly the bytes whose
// hashes were checked, so that a loader deserializes what was verified (no second read).
struct VerifiedCheckpoint {
  std::map<std::string, std::string> files;
  // Files in the directory that the MANIFEST does not list. They are not read or trusted; a
  // checkpoint with extra files is still valid (a stray editor backup should not cost the run
  // its newest checkpoint), and the caller reports them.
  std::vector<std::string> unlisted;
};

// Reads `dir`/MANIFEST and every file it lists and checks sizes and hashes. `required` names files
// that the MANIFEST must list. Throws InvalidCheckpoint (reason only: "missing MANIFEST",
// "model.pt: size 100 bytes, MANIFEST says 2048 (truncated?)", "optim.pt: SHA-256 mismatch",
// "state.pb listed in MANIFEST but missing") for a bad checkpoint; FileSystemError passes through
// only for a failure to list `dir` itself. Blocks on reading every file.
VerifiedCheckpoint verifyCheckpoint(FileSystem& fs, const std::string& dir,
                                    const std::vector<std::string>& required);

// A checkpoint directory's files as one byte string, for a transfer that never touches a disk
// (a live peer healing another): the MANIFEST of `files`, then each file's bytes in the MANIFEST's
// order (by name). Throws std::invalid_argument for a name encodeManifest refuses.
std::string packCheckpointFiles(const std::map<std::string, std::string>& files);
// The inverse, with verifyCheckpoint's checks: the MANIFEST parses and lists `required`, each
// file's size and SHA-256 match, and nothing follows the last file. Throws InvalidCheckpoint with
// the reason alone. Never reads outside `packed`.
VerifiedCheckpoint unpackCheckpointFiles(std::string_view packed,
                                         const std::vector<std::string>& required);

}  // namespace cumulus::checkpoint
