#pragma once
// Private factories for tests (not installed): a public ProcessGroup over a caller-owned Store, so
// that a test runs ranks as threads over a comm::MemoryStore, and fromEnvironment over a map of
// variables instead of the process environment.

#include <map>
#include <memory>
#include <string>

#include "api/process_group_impl.h"
#include "base/run_env.h"
#include "comm/store.h"
#include "cumulus/process_group.h"

namespace cumulus::testing {

// Rank env.rank of env.world_size over `store`, which must outlive the group. Blocks for the
// rendezvous like fromEnvironment; a group of one when env.world_size == 1.
inline std::unique_ptr<ProcessGroup> groupOverStore(const base::RunEnv& env, comm::Store& store,
                                                    const GroupOptions& options = {}) {
  return ProcessGroup::Impl::overStore(env, options, store);
}

// ProcessGroup::fromEnvironment as if the environment held exactly `variables`.
inline std::unique_ptr<ProcessGroup> groupFromVariables(
    const std::map<std::string, std::string>& variables, const GroupOptions& options = {}) {
  return ProcessGroup::Impl::fromEnvironment(options, [&variables](const char* name) {
    const auto it = variables.find(name);
    return it == variables.end() ? static_cast<const char*>(nullptr) : it->second.c_str();
  });
}

}  // namespace cumulus::testing
