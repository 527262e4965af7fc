#pragma once
// Opening an input file that must be a regular file (a dataset, a model) without hanging on
// anything else: open(2) of a FIFO blocks until a writer appears, and a read of a device or a
// socket may never end. The file is opened O_NONBLOCK, checked with fstat, and only then made
// blocking again. Never blocks on a FIFO; a regular file on a hung network mount can still block.

#include <string>

#include "base/fd.h"

namespace cumulus::base {

// What a file of mode `st_mode` is, for a message: "a regular file", "a directory", "a FIFO",
// "a socket", "a character device", "a block device", "a symbolic link", "an unknown kind of file".
std::string fileKindOf(unsigned st_mode);

// An open, blocking, read-only, close-on-exec descriptor of `path` when it is a regular file (or
// a symbolic link to one). Otherwise an invalid Fd and `problem` says what is wrong, in words that
// go after "<path>: ": "not found", "cannot open: Permission denied", "is a FIFO, not a regular
// file", ...
Fd openRegularFile(const std::string& path, std::string& problem);

}  // namespace cumulus::base
