#include "base/exec_env.h"

#include <algorithm>

extern char** environ;

namespace cumulus::base {

ExecArgs::ExecArgs(std::vector<std::string> argv, const std::vector<Change>& changes)
    : argv_(std::move(argv)) {
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) env_.emplace_back(*e);
  for (const auto& [name, value] : changes) {
    const std::string prefix = name + "=";
    env_.erase(std::remove_if(env_.begin(), env_.end(),
                              [&](const std::string& entry) { return entry.rfind(prefix, 0) == 0; }),
               env_.end());
    if (value) env_.push_back(prefix + *value);
  }
  for (std::string& s : argv_) argv_pointers_.push_back(s.data());
  argv_pointers_.push_back(nullptr);
  for (std::string& s : env_) env_pointers_.push_back(s.data());
  env_pointers_.push_back(nullptr);
}

}  // namespace cumulus::base
