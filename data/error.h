#pragma once
// The one error type of data/: a problem with an input file, its text "<path>: <what is wrong>".

#include <stdexcept>
#include <string>

namespace cumulus::data {

class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws DataError("<path>: <what>").
[[noreturn]] inline void failOn(const std::string& path, const std::string& what) {
  throw DataError(path + ": " + what);
}

}  // namespace cumulus::data
