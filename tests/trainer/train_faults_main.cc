// cumulus-train-faults: cumulus-train with faults a test chooses
// (tests/trainer/resume_process_test).
//
//   cumulus-train-faults [--fault-sigterm-at-step S[:RANK]] [--sample-ledger PATH]
//                        -- CONFIG.yaml [cumulus-train's flags]
//
// --fault-sigterm-at-step S[:RANK]  rank RANK (every rank without it) raises SIGTERM at itself
//                                   after step S (SigtermAfterStep), so a stop lands there
// --sample-ledger PATH              each rank appends the samples of each step to PATH.rank<R>
//                                   (LedgerBatchSource; resume.h SampleLedger reads them)
// Everything after "--" goes to trainer::trainCommand unchanged; the faults enter through the
// TrainerOptions customization, the seam cumulus-train's own main leaves empty.

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cumulus/process_group.h"
#include "tests/trainer/fault_parts.h"
#include "trainer/rank_reduce.h"
#include "trainer/train_command.h"

namespace {

using namespace cumulus::trainer;

struct Faults {
  int64_t sigterm_step = -1;  // -1: none
  int64_t sigterm_rank = -1;  // -1: every rank
  std::string ledger;         // empty: none
};

int64_t parseInteger(const std::string& text, const std::string& flag) {
  size_t used = 0;
  int64_t value = -1;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || value < 0) {
    throw std::invalid_argument(flag + ": '" + text + "' is not a non-negative integer");
  }
  return value;
}

// Reads the faults before "--"; returns the index of the first argument after it.
int parseFaults(int argc, char** argv, Faults& faults) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") return i + 1;
    if (i + 1 >= argc) throw std::invalid_argument(arg + ": needs a value");
    const std::string value = argv[++i];
    if (arg == "--fault-sigterm-at-step") {
      const size_t colon = value.find(':');
      faults.sigterm_step = parseInteger(value.substr(0, colon), arg);
      if (colon != std::string::npos)
        faults.sigterm_rank = parseInteger(value.substr(colon + 1), arg);
    } else if (arg == "--sample-ledger") {
      faults.ledger = value;
    } else {
      throw std::invalid_argument(arg + ": unknown; use --fault-sigterm-at-step, --sample-ledger");
    }
  }
  throw std::invalid_argument("missing \"--\" before cumulus-train's arguments");
}

int64_t unixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void install(const Faults& faults, TrainerOptions& options) {
  cumulus::ProcessGroup* group = options.group;
  const int64_t rank = group != nullptr ? group->rank() : 0;
  if (faults.sigterm_step >= 0 && (faults.sigterm_rank < 0 || faults.sigterm_rank == rank)) {
    options.stop = [step = faults.sigterm_step](std::shared_ptr<StopAgreement> standard) {
      return std::make_shared<SigtermAfterStep>(std::move(standard), step);
    };
  }
  if (!faults.ledger.empty()) {
    // One id for every rank of this launch (their clocks start apart): the latest start.
    const int64_t launch = maxOverRanks(group, unixMillis());
    const std::string path = faults.ledger + ".rank" + std::to_string(rank);
    options.batches = [path, launch, rank](std::shared_ptr<BatchSource> standard) {
      return std::make_shared<LedgerBatchSource>(std::move(standard), path, launch, rank);
    };
  }
}

}  // namespace

int main(int argc, char** argv) {
  Faults faults;
  int first = 0;
  try {
    first = parseFaults(argc, argv, faults);
  } catch (const std::exception& e) {
    std::cerr << "cumulus-train-faults: error: " << e.what() << "\n";
    return 2;
  }
  std::vector<char*> rest = {argv[0]};
  for (int i = first; i < argc; ++i) rest.push_back(argv[i]);
  rest.push_back(nullptr);
  return trainCommand(static_cast<int>(rest.size()) - 1, rest.data(),
                      [&faults](TrainerOptions& options) { install(faults, options); });
}
