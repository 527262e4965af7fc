#include "checkpoint/checkpoint_manifest.h"

#include <algorithm>
#include <cerrno>
#include <set>

#include "base/hash.h"
#include "base/integer.h"

namespace cumulus::checkpoint {
namespace {

const std::string kHeader = "cumulus-checkpoint-manifest " + std::to_string(kManifestVersion);

bool validName(std::string_view name) {
  if (name.empty() || name == "." || name == "..") return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

bool validHex(std::string_view hex) {
  return hex.size() == 64 && std::all_of(hex.begin(), hex.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

ManifestEntry parseEntry(std::string_view line, size_t line_number) {
  const std::string where = "MANIFEST line " + std::to_string(line_number) + ": ";
  const size_t first = line.find(' ');
  const size_t second = first == std::string_view::npos ? first : line.find(' ', first + 1);
  if (second == std::string_view::npos) {
    throw InvalidCheckpoint(where + "expected \"<sha256> <size> <name>\"");
  }
  ManifestEntry entry;
  entry.sha256 = std::string(line.substr(0, first));
  const std::string_view size = line.substr(first + 1, second - first - 1);
  entry.name = std::string(line.substr(second + 1));
  if (!validHex(entry.sha256))
    throw InvalidCheckpoint(where + "bad SHA-256 \"" + entry.sha256 + "\"");
  const std::optional<uint64_t> bytes = size.size() > 19 ? std::nullopt : base::parseUnsigned(size);
  if (!bytes) throw InvalidCheckpoint(where + "bad size \"" + std::string(size) + "\"");
  entry.size = *bytes;
  if (!validName(entry.name))
    throw InvalidCheckpoint(where + "bad file name \"" + entry.name + "\"");
  return entry;
}

}  // namespace

std::optional<uint64_t> checkpointDirStep(const std::string& name) {
  constexpr std::string_view kPrefix = "step-";
  if (name.size() <= kPrefix.size() || name.size() > kPrefix.size() + 19 ||
      name.compare(0, kPrefix.size(), kPrefix) != 0) {
    return std::nullopt;
  }
  uint64_t step = 0;
  for (size_t i = kPrefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    step = step * 10 + static_cast<uint64_t>(name[i] - '0');
  }
  return step;
}

std::string checkpointDirName(uint64_t step) {
  std::string digits = std::to_string(step);
  if (digits.size() < 8) digits.insert(0, 8 - digits.size(), '0');
  return "step-" + digits;
}

ManifestEntry describeFile(const std::string& name, std::string_view bytes) {
  return {name, bytes.size(), base::sha256Hex(bytes)};
}

std::string encodeManifest(std::vector<ManifestEntry> entries) {
  std::sort(entries.begin(), entries.end(),
            [](const ManifestEntry& a, const ManifestEntry& b) { return a.name < b.name; });
  std::string body = kHeader + "\n";
  for (size_t i = 0; i < entries.size(); ++i) {
    const ManifestEntry& e = entries[i];
    if (!validName(e.name) || e.name == kManifestName) {
      throw std::invalid_argument("checkpoint file name \"" + e.name + "\" is not allowed");
    }
    if (i > 0 && entries[i - 1].name == e.name) {
      throw std::invalid_argument("checkpoint file \"" + e.name + "\" listed twice");
    }
    body += e.sha256 + " " + std::to_string(e.size) + " " + e.name + "\n";
  }
  return body + "end " + base::sha256Hex(body) + "\n";
}

std::vector<ManifestEntry> parseManifest(std::string_view text) {
  if (text.empty()) throw InvalidCheckpoint("empty MANIFEST");
  if (text.back() != '\n') throw InvalidCheckpoint("torn MANIFEST: no final line end");
  // The trailer covers everything before it, so check it before trusting any other line.
  const size_t trailer_start = text.rfind('\n', text.size() - 2) + 1;  // npos + 1 == 0
  const std::string_view trailer = text.substr(trailer_start, text.size() - 1 - trailer_start);
  const std::string_view body = text.substr(0, trailer_start);
  if (trailer.substr(0, 4) != "end " || !validHex(trailer.substr(4))) {
    throw InvalidCheckpoint("torn MANIFEST: the last line is not \"end <sha256>\"");
  }
  if (base::sha256Hex(body) != trailer.substr(4)) {
    throw InvalidCheckpoint("corrupt MANIFEST: its SHA-256 does not match its end line");
  }
  std::vector<ManifestEntry> entries;
  std::set<std::string> names;
  size_t line_number = 0;
  for (size_t pos = 0; pos < body.size();) {
    const size_t end = body.find('\n', pos);
    const std::string_view line = body.substr(pos, end - pos);
    pos = end + 1;
    if (++line_number == 1) {
      if (line != kHeader) {
        throw InvalidCheckpoint("MANIFEST line 1: \"" + std::string(line) + "\", expected \"" +
                                kHeader + "\" (another format version?)");
      }
      continue;
    }
    ManifestEntry entry = parseEntry(line, line_number);
    if (entry.name == kManifestName || !names.insert(entry.name).second) {
      throw InvalidCheckpoint("MANIFEST line " + std::to_string(line_number) + ": \"" + entry.name +
                              "\" listed twice or lists itself");
    }
    entries.push_back(std::move(entry));
  }
  if (line_number == 0) throw InvalidCheckpoint("MANIFEST has no header line");
  return entries;
}

namespace {

void checkHash(const ManifestEntry& entry, std::string_view bytes, const char* cause) {
  if (base::sha256Hex(bytes) != entry.sha256) {
    throw InvalidCheckpoint(entry.name + ": SHA-256 mismatch (corrupt: " + cause + ")");
  }
}

// The names the MANIFEST lists; throws unless `required` are among them.
std::set<std::string> checkListed(const std::vector<ManifestEntry>& entries,
                                  const std::vector<std::string>& required) {
  std::set<std::string> listed;
  for (const ManifestEntry& entry : entries) listed.insert(entry.name);
  for (const std::string& name : required) {
    if (listed.count(name) == 0) throw InvalidCheckpoint("MANIFEST does not list " + name);
  }
  return listed;
}

}  // namespace

VerifiedCheckpoint verifyCheckpoint(FileSystem& fs, const std::string& dir,
                                    const std::vector<std::string>& required) {
  std::set<std::string> present;
  for (const DirEntry& entry : fs.list(dir)) present.insert(entry.name);
  if (present.count(kManifestName) == 0) {
    throw InvalidCheckpoint("missing MANIFEST (an incomplete or interrupted save)");
  }
  std::string manifest_text;
  try {
    manifest_text = fs.readFile(dir + "/" + kManifestName);
  } catch (const FileSystemError& e) {
    throw InvalidCheckpoint(std::string("cannot read MANIFEST: ") + e.what());
  }
  const std::vector<ManifestEntry> entries = parseManifest(manifest_text);
  const std::set<std::string> listed = checkListed(entries, required);
  VerifiedCheckpoint out;
  for (const ManifestEntry& entry : entries) {
    if (present.count(entry.name) == 0) {
      throw InvalidCheckpoint(entry.name + " listed in MANIFEST but missing");
    }
    std::string bytes;
    try {
      bytes = fs.readFile(dir + "/" + entry.name);
    } catch (const FileSystemError& e) {
      throw InvalidCheckpoint(std::string("cannot read ") + entry.name + ": " + e.what());
    }
    if (bytes.size() != entry.size) {
      throw InvalidCheckpoint(entry.name + ": size " + std::to_string(bytes.size()) +
                              " bytes, MANIFEST says " + std::to_string(entry.size) +
                              (bytes.size() < entry.size ? " (truncated)" : " (overwritten)"));
    }
    checkHash(entry, bytes, "content changed after the save");
    out.files.emplace(entry.name, std::move(bytes));
  }
  for (const std::string& name : present) {
    if (name != kManifestName && listed.count(name) == 0) out.unlisted.push_back(name);
  }
  return out;
}

std::string packCheckpointFiles(const std::map<std::string, std::string>& files) {
  std::vector<ManifestEntry> entries;
  size_t total = 0;
  for (const auto& [name, bytes] : files) {
    entries.push_back(describeFile(name, bytes));
    total += bytes.size();
  }
  std::string packed = encodeManifest(std::move(entries));  // sorted by name, as `files` is
  packed.reserve(packed.size() + total);
  for (const auto& [name, bytes] : files) packed += bytes;
  return packed;
}

VerifiedCheckpoint unpackCheckpointFiles(std::string_view packed,
                                         const std::vector<std::string>& required) {
  // The MANIFEST ends with its "end <sha256>" line: no earlier line can start with "end " (the
  // header is fixed, and a file's line starts with hex digits).
  const size_t end = packed.find("\nend ");
  const size_t line_end = end == std::string_view::npos ? end : packed.find('\n', end + 1);
  if (line_end == std::string_view::npos) {
    throw InvalidCheckpoint("torn MANIFEST: no \"end\" line in the first " +
                            std::to_string(packed.size()) + " bytes");
  }
  const std::vector<ManifestEntry> entries = parseManifest(packed.substr(0, line_end + 1));
  checkListed(entries, required);
  VerifiedCheckpoint out;
  size_t at = line_end + 1;
  for (const ManifestEntry& entry : entries) {
    const size_t left = packed.size() - at;
    if (entry.size > left) {
      throw InvalidCheckpoint(entry.name + ": MANIFEST says " + std::to_string(entry.size) +
                              " bytes, but only " + std::to_string(left) + " follow (truncated)");
    }
    const std::string_view bytes = packed.substr(at, entry.size);
    checkHash(entry, bytes, "changed in transit");
    out.files.emplace(entry.name, std::string(bytes));
    at += entry.size;
  }
  if (at != packed.size()) {
    throw InvalidCheckpoint(std::to_string(packed.size() - at) +
                            " bytes follow the last file that MANIFEST lists");
  }
  return out;
}

}  // namespace cumulus::checkpoint
