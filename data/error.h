#pragma once
// The one error type of data/: a problem with an input file, its text "<path>: <what is wrong>".

#include <stdexcept>

namespace cumulus::data {

class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace cumulus::data
