#include "launch/slurm_env.h"

#include <optional>

#include "base/env_names.h"
#include "base/integer.h"

namespace cumulus::launch {
namespace {

int64_t parseCount(const std::string& text, const std::string& what, int64_t min, int64_t max) {
  const std::optional<int64_t> value = base::parseInteger(text, min, max);
  if (!value) throw UsageError(what + ": " + base::integerProblem(text, min, max));
  return *value;
}

// Splits at commas that are not inside brackets.
std::vector<std::string> splitTopLevel(const std::string& list, const std::string& what) {
  std::vector<std::string> out;
  std::string current;
  int depth = 0;
  for (char c : list) {
    if (c == '[') ++depth;
    if (c == ']' && --depth < 0) break;
    if (c == ',' && depth == 0) {
      out.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  if (depth != 0) throw UsageError(what + "=\"" + list + "\": unbalanced brackets");
  out.push_back(current);
  return out;
}

}  // namespace

std::vector<std::string> expandSlurmNodelist(const std::string& nodelist) {
  const std::string what = "SLURM_JOB_NODELIST";
  std::vector<std::string> hosts;
  for (const std::string& item : splitTopLevel(nodelist, what)) {
    if (item.empty()) continue;
    const size_t open = item.find('[');
    if (open == std::string::npos) {
      hosts.push_back(item);
      continue;
    }
    const size_t close = item.find(']', open);
    const std::string prefix = item.substr(0, open);
    const std::string suffix = item.substr(close + 1);
    if (suffix.find('[') != std::string::npos) {
      throw UsageError(what + "=\"" + nodelist + "\": more than one bracket group in \"" + item +
                       "\" is not supported; give the first host with --rdzv-endpoint");
    }
    size_t start = open + 1;
    const std::string ranges = item.substr(start, close - start);
    size_t pos = 0;
    while (pos <= ranges.size()) {
      size_t comma = ranges.find(',', pos);
      if (comma == std::string::npos) comma = ranges.size();
      const std::string range = ranges.substr(pos, comma - pos);
      const size_t dash = range.find('-');
      const std::string lo_text = range.substr(0, dash);
      const std::string hi_text = dash == std::string::npos ? lo_text : range.substr(dash + 1);
      const int64_t lo = parseCount(lo_text, what + " range", 0, 999999999);
      const int64_t hi = parseCount(hi_text, what + " range", lo, 999999999);
      if (hi - lo > 65536) throw UsageError(what + "=\"" + nodelist + "\": range too large");
      for (int64_t n = lo; n <= hi; ++n) {
        std::string digits = std::to_string(n);
        if (digits.size() < lo_text.size()) {
          digits.insert(0, lo_text.size() - digits.size(), '0');
        }
        hosts.push_back(prefix + digits + suffix);
      }
      pos = comma + 1;
    }
  }
  if (hosts.empty()) throw UsageError(what + "=\"" + nodelist + "\" names no host");
  return hosts;
}

bool applySlurmEnvironment(LaunchOptions& o,
                           const std::function<const char*(const char*)>& getenv) {
  auto get = [&](const char* name) -> std::string {
    const char* v = getenv(name);
    return v ? std::string(v) : std::string();
  };
  const std::string job_id = get("SLURM_JOB_ID");
  if (job_id.empty()) return false;
  auto given = [&](const char* flag) { return o.explicit_flags.count(flag) > 0; };

  std::string nnodes = get("SLURM_NNODES");
  if (nnodes.empty()) nnodes = get("SLURM_JOB_NUM_NODES");
  if (!given("nnodes") && !nnodes.empty()) {
    o.min_nodes = o.max_nodes = parseCount(nnodes, "SLURM_NNODES", 1, 4096);
    o.allocation_nodes = o.max_nodes;
    o.explicit_flags.insert("nnodes");
  }
  if (const std::string id = get("SLURM_NODEID"); !given("node-rank") && !id.empty()) {
    o.node_rank = parseCount(id, "SLURM_NODEID", 0, 4095);
    o.explicit_flags.insert("node-rank");
  }
  std::string nodelist = get("SLURM_JOB_NODELIST");
  if (nodelist.empty()) nodelist = get("SLURM_NODELIST");
  if (!given("rdzv-endpoint") && !given("standalone") && !nodelist.empty()) {
    o.rdzv_host = expandSlurmNodelist(nodelist).front();
    const std::string port = get(base::env::kRdzvPort);
    o.rdzv_port = port.empty() ? kSlurmRdzvPort
                               : static_cast<int>(parseCount(port, base::env::kRdzvPort, 1, 65535));
    o.explicit_flags.insert("rdzv-endpoint");
  }
  if (!given("run-id")) {
    o.run_id = "slurm-" + job_id;
    o.explicit_flags.insert("run-id");
  }
  if (o.node_rank >= o.max_nodes) {
    throw UsageError("SLURM_NODEID=" + std::to_string(o.node_rank) + " is out of range for " +
                     std::to_string(o.max_nodes) + " node(s) (SLURM_NNODES)");
  }
  return true;
}

}  // namespace cumulus::launch
