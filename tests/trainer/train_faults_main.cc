// cumulus-train-faults: cumulus-train with faults a test chooses
// (tests/trainer/resume_process_test).
//
//   cumulus-train-faults [--fault-sigterm-at-step S[:RANK]] [--sample-ledger PATH]
//                        [--fault-kill SPEC] [--fault-stall SPEC] [...] -- CONFIG.yaml [flags]
//
// --fault-sigterm-at-step S[:RANK]  rank RANK (every rank without it) raises SIGTERM at itself
//                                   after step S (SigtermAtStep), so a stop lands there;
//                                   S@MEMBER: the worker whose CUMULUS_MEMBER_ID is MEMBER
// --sample-ledger PATH              each rank appends the samples of each step to PATH.rank<R>
//                                   (in place: PATH.member<ID>, with the epoch's generation as
//                                   the launch; LedgerBatchSource; resume.h SampleLedger reads
//                                   them)
// --fault-kill SPEC                 STEP@MEMBER[+MS],…: that member SIGKILLs itself when it draws
//                                   step STEP (0-based), MS milliseconds later if given
//                                   (KillAtStep)
// --fault-stall SPEC                STEP@MEMBER+MS,…: that member sleeps MS ms when it draws STEP
// --fault-kill-on MEMBER:TEXT       that member SIGKILLs itself when it records a note or warning
//                                   containing TEXT (KillOnText)
// --fault-kill-in-record SPEC       STEP@MEMBER,…: that member SIGKILLs itself as it records step
//                                   STEP (1-based), in the step's boundary (KillAtRecord)
// --fault-kill-at-start MEMBER      that member SIGKILLs itself once connected to the group,
//                                   before the trainer's start-up collectives
// --faults-in-generation G          the faults above apply only to workers of the launcher's
//                                   generation G (CUMULUS_GENERATION): a restarted group's
//                                   members, named as the first ones were, train without them
// --fault-slow RANK+US              rank RANK sleeps US microseconds per sample of its share at
//                                   every step, a slow worker (SlowSamples; trainer.balance)
// --fault-hold-for-joiner STEP      every worker waits at step STEP until a joiner has taken the
//                                   first join ticket in the Store (in place)
// --fault-fill-disk STEP:PATH       once the checkpoint of step STEP is recorded, PATH is written
//                                   until its disk is full (FillDiskAfterCheckpoint)
// Everything after "--" goes to trainer::trainCommand unchanged; the faults enter through the
// TrainerOptions customization, the seam cumulus-train's own main leaves empty.

#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/run_env.h"
#include "comm/store_client.h"
#include "comm/store_keys.h"
#include "cumulus/process_group.h"
#include "tests/trainer/fault_parts.h"
#include "trainer/rank_reduce.h"
#include "trainer/train_command.h"

namespace {

using namespace cumulus::trainer;
namespace metrics = cumulus::metrics;

struct Faults {
  int64_t sigterm_step = -1;   // -1: none
  int64_t sigterm_rank = -1;   // -1: every rank
  std::string sigterm_member;  // non-empty: only this member
  std::string ledger;          // empty: none
  std::string kill;            // --fault-kill
  std::string stall;           // --fault-stall
  int64_t hold_step = -1;      // --fault-hold-for-joiner
  std::string kill_on;         // --fault-kill-on MEMBER:TEXT
  std::string kill_in_record;  // --fault-kill-in-record
  std::string kill_at_start;   // --fault-kill-at-start MEMBER
  int64_t generation = -1;     // --faults-in-generation (-1: every generation)
  int64_t slow_rank = -1;      // --fault-slow RANK+US
  int64_t slow_us = 0;
  int64_t fill_step = -1;  // --fault-fill-disk STEP:PATH
  std::string fill_path;
};

std::string memberId() {
  const char* id = std::getenv("CUMULUS_MEMBER_ID");
  return id == nullptr ? "" : id;
}

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
    if (arg == "--fault-sigterm-at-step" && value.find('@') != std::string::npos) {
      faults.sigterm_step = parseInteger(value.substr(0, value.find('@')), arg);
      faults.sigterm_member = value.substr(value.find('@') + 1);
    } else if (arg == "--fault-kill") {
      faults.kill = value;
    } else if (arg == "--fault-stall") {
      faults.stall = value;
    } else if (arg == "--fault-kill-on") {
      faults.kill_on = value;
    } else if (arg == "--fault-kill-in-record") {
      faults.kill_in_record = value;
    } else if (arg == "--fault-kill-at-start") {
      faults.kill_at_start = value;
    } else if (arg == "--faults-in-generation") {
      faults.generation = parseInteger(value, arg);
    } else if (arg == "--fault-slow") {
      const size_t plus = value.find('+');
      if (plus == std::string::npos) throw std::invalid_argument(arg + " '" + value + "': RANK+US");
      faults.slow_rank = parseInteger(value.substr(0, plus), arg);
      faults.slow_us = parseInteger(value.substr(plus + 1), arg);
    } else if (arg == "--fault-hold-for-joiner") {
      faults.hold_step = parseInteger(value, arg);
    } else if (arg == "--fault-sigterm-at-step") {
      const size_t colon = value.find(':');
      faults.sigterm_step = parseInteger(value.substr(0, colon), arg);
      if (colon != std::string::npos)
        faults.sigterm_rank = parseInteger(value.substr(colon + 1), arg);
    } else if (arg == "--sample-ledger") {
      faults.ledger = value;
    } else if (arg == "--fault-fill-disk") {
      const size_t colon = value.find(':');
      if (colon == std::string::npos)
        throw std::invalid_argument(arg + " '" + value + "': STEP:PATH");
      faults.fill_step = parseInteger(value.substr(0, colon), arg);
      faults.fill_path = value.substr(colon + 1);
    } else {
      throw std::invalid_argument(
          arg +
          ": unknown; use --fault-sigterm-at-step, --sample-ledger, "
          "--fault-kill, --fault-stall, --fault-kill-on, --fault-kill-in-record, "
          "--fault-kill-at-start, --faults-in-generation, --fault-slow, --fault-hold-for-joiner, "
          "--fault-fill-disk");
    }
  }
  throw std::invalid_argument("missing \"--\" before cumulus-train's arguments");
}

int64_t unixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// This member's entry of a STEP@MEMBER[+MS],… list: {step, ms}, or {-1, 0}.
std::pair<int64_t, int64_t> entryFor(const std::string& spec, const std::string& member) {
  size_t at = 0;
  while (at < spec.size()) {
    const size_t comma = std::min(spec.find(',', at), spec.size());
    const std::string entry = spec.substr(at, comma - at);
    at = comma + 1;
    const size_t sign = entry.find('@');
    if (sign == std::string::npos)
      throw std::invalid_argument("fault '" + entry + "': STEP@MEMBER");
    const size_t plus = entry.find('+', sign);
    const std::string who =
        entry.substr(sign + 1, plus == std::string::npos ? std::string::npos : plus - sign - 1);
    if (who != member) continue;
    const int64_t ms = plus == std::string::npos ? 0 : parseInteger(entry.substr(plus + 1), entry);
    return {parseInteger(entry.substr(0, sign), entry), ms};
  }
  return {-1, 0};
}

void install(Faults faults, TrainerOptions& options) {
  if (faults.generation >= 0 &&
      cumulus::base::RunEnv::fromEnvironment().generation != faults.generation) {
    faults.kill.clear();
    faults.stall.clear();
    faults.kill_on.clear();
    faults.kill_in_record.clear();
    faults.kill_at_start.clear();
  }
  cumulus::ProcessGroup* group = options.group;
  const bool in_place = options.elastic != nullptr;
  const int64_t rank = group != nullptr ? group->rank() : 0;
  const std::string member = memberId();
  // Called once the group is connected (in place: epoch 0), before the Trainer is built.
  if (!faults.kill_at_start.empty() && faults.kill_at_start == member) ::raise(SIGKILL);
  const bool sigterm_here = faults.sigterm_member.empty()
                                ? faults.sigterm_rank < 0 || faults.sigterm_rank == rank
                                : faults.sigterm_member == member;
  std::vector<std::function<std::shared_ptr<BatchSource>(std::shared_ptr<BatchSource>)>> wraps;
  for (const auto& [spec, stall] : {std::pair{faults.kill, false}, std::pair{faults.stall, true}}) {
    const auto [step, ms] = entryFor(spec, member);
    if (step < 0) continue;
    wraps.push_back([step = step, ms = ms, stall = stall](std::shared_ptr<BatchSource> inner) {
      return std::make_shared<KillAtStep>(std::move(inner), step, ms, stall);
    });
  }
  if (faults.slow_rank >= 0 && faults.slow_rank == rank) {
    wraps.push_back([us = faults.slow_us](std::shared_ptr<BatchSource> inner) {
      return std::make_shared<SlowSamples>(std::move(inner), us);
    });
  }
  std::vector<std::function<std::shared_ptr<metrics::MetricsRecorder>(
      std::shared_ptr<metrics::MetricsRecorder>)>>
      recorders;
  if (faults.sigterm_step >= 0 && sigterm_here) {
    recorders.push_back(
        [step = faults.sigterm_step](std::shared_ptr<metrics::MetricsRecorder> inner) {
          return std::make_shared<SigtermAtStep>(std::move(inner), step);
        });
  }
  if (const size_t colon = faults.kill_on.find(':');
      colon != std::string::npos && faults.kill_on.substr(0, colon) == member) {
    recorders.push_back(
        [text = faults.kill_on.substr(colon + 1)](std::shared_ptr<metrics::MetricsRecorder> inner) {
          return std::make_shared<KillOnText>(std::move(inner), text);
        });
  }
  if (const int64_t step = entryFor(faults.kill_in_record, member).first; step >= 0) {
    recorders.push_back([step](std::shared_ptr<metrics::MetricsRecorder> inner) {
      return std::make_shared<KillAtRecord>(std::move(inner), step);
    });
  }
  if (faults.fill_step >= 0) {
    recorders.push_back([step = faults.fill_step,
                         path = faults.fill_path](std::shared_ptr<metrics::MetricsRecorder> inner) {
      return std::make_shared<FillDiskAfterCheckpoint>(std::move(inner), step, path);
    });
  }
  if (!recorders.empty()) {
    options.metrics = [recorders](std::shared_ptr<metrics::MetricsRecorder> standard) {
      for (const auto& wrap : recorders) standard = wrap(std::move(standard));
      return standard;
    };
  }
  if (faults.hold_step >= 0) {
    // The launcher's Store, read as any process of the job may.
    const cumulus::base::RunEnv env = cumulus::base::RunEnv::fromEnvironment();
    auto wait = [env] {
      cumulus::comm::StoreClient store(env.store_host, static_cast<int>(env.store_port),
                                       env.job_token);
      store.get(cumulus::comm::quorumTicketKey(env.generation, 1), std::chrono::minutes(2));
    };
    wraps.push_back([step = faults.hold_step, wait](std::shared_ptr<BatchSource> inner) {
      return std::make_shared<HoldAtStep>(std::move(inner), step, wait);
    });
  }
  if (!faults.ledger.empty()) {
    std::function<int64_t()> launch;
    std::function<int64_t()> rank_now;
    std::string path;
    if (in_place) {
      launch = [group] { return static_cast<int64_t>(group->generation()); };
      rank_now = [group] { return static_cast<int64_t>(group->rank()); };
      path = faults.ledger + ".member" + member;
    } else {
      // One id for every rank of this launch (their clocks start apart): the latest start.
      launch = [id = maxOverRanks(group, unixMillis())] { return id; };
      rank_now = [rank] { return rank; };
      path = faults.ledger + ".rank" + std::to_string(rank);
    }
    wraps.push_back([path, launch, rank_now](std::shared_ptr<BatchSource> inner) {
      return std::make_shared<LedgerBatchSource>(std::move(inner), path, launch, rank_now);
    });
  }
  if (wraps.empty()) return;
  options.batches = [wraps](std::shared_ptr<BatchSource> standard) {
    for (const auto& wrap : wraps) standard = wrap(std::move(standard));
    return standard;
  };
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
