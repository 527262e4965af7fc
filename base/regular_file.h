#pragma once
// Opening an input file that must be a regular file (a dataset, a model) without hanging on
// anything else: open(2) of a FIFO blocks until a writer appears, and a read of a device or a
// socket may never end. The file is opened O_NONBLOCK, checked with fstat, and only then made
// blocking again. Never blocks on a FIFO; a regular file on a hung network mount can still block.

#include <cstddef>
#include <optional>
#include <string>

#include "base/fd.h"

namespace cumulus::base {

// What a file of mode `st_mode` is, for a message: "a regular file", "a directory", "a FIFO",
// "a socket", "a character device", "a block device", "a symbolic link", "an unknown kind of file".
std::string fileKindOf(unsigned st_mode);

// The problem of a path that does not exist, for callers to whom a missing file is no error.
inline constexpr const char* kNotFound = "not found";

// An open, blocking, read-only, close-on-exec descriptor of `path` when it is a regular file (or
// a symbolic link to one). Otherwise an invalid Fd and `problem` says what is wrong, in words that
// go after "<path>: ": "not found" (kNotFound), "cannot open: Permission denied", "is a FIFO, not
// a regular file", ...
Fd openRegularFile(const std::string& path, std::string& problem);

// The bytes of `path` when it is a regular file (as openRegularFile decides), read to its end or
// to `at_most` bytes, whichever comes first: a caller with a size limit passes its limit + 1 and
// so tells a file over it. std::nullopt when it cannot be opened or read, and `problem` says why
// in openRegularFile's words, or "cannot read: <errno text>".
std::optional<std::string> readRegularFile(const std::string& path, std::string& problem,
                                           size_t at_most = static_cast<size_t>(-1));

}  // namespace cumulus::base
