#include "trainer/resume.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>
#include <tuple>
#include <utility>

#include "base/integer.h"
#include "configs/digest.h"
#include "configs/parse.h"

namespace cumulus::trainer {

// Everything not listed is semantic: the model (model.num_classes too), the data (data.format,
// data.train, data.test, data.seq_len, as much as data.dataset and data.dir: other samples are
// another run, and a path that moved takes --allow-config-change) and the loss (loss.name).
const std::vector<std::string> kOperationalKeyPrefixes = {"name",
                                                          "trainer.run_dir",
                                                          "trainer.log_every_steps",
                                                          "trainer.log_all_ranks",
                                                          "trainer.threads",
                                                          "trainer.precision",
                                                          "trainer.step_timeout_seconds",
                                                          "trainer.balance",
                                                          "data.cache",
                                                          "eval.",
                                                          "checkpoint.",
                                                          "comm.",
                                                          "launch."};

namespace {

// For a >= 0 and b > 0; (a + b - 1) / b would overflow for an `a` near 2^63 - 1.
int64_t ceilDiv(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

bool isOperational(const std::string& key) {
  for (const std::string& prefix : kOperationalKeyPrefixes) {
    if (key.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

std::string keyOf(const std::string& describe_line) {
  return describe_line.substr(0, describe_line.find(": "));
}

}  // namespace

ResumeMode ResumeMode::parse(const std::string& text) {
  ResumeMode mode;
  if (text.empty() || text == "none") {
    mode.kind = Kind::kNone;
  } else if (text == "auto") {
    mode.kind = Kind::kAuto;
  } else {
    mode.kind = Kind::kPath;
    mode.path = text;
  }
  return mode;
}

ResumeMode ResumeMode::defaultFor(bool under_launcher) {
  ResumeMode mode;
  mode.kind = under_launcher ? Kind::kAuto : Kind::kNone;
  return mode;
}

std::vector<std::string> semanticDiffKeys(const configs::Experiment& before,
                                          const configs::Experiment& after) {
  std::vector<std::string> keys;
  for (const std::string& key : configs::diffKeys(before, after)) {
    if (!isOperational(key)) keys.push_back(key);
  }
  return keys;
}

const char kOtherExperimentChoices[] =
    "start over in this directory with --overwrite (which removes its checkpoints), or give the "
    "run another trainer.run_dir";

std::vector<std::string> otherExperimentChanges(const configs::Experiment& current,
                                                const CheckpointState& state) {
  configs::Experiment saved;
  try {
    saved = configs::parseExperiment(state.config_yaml, "state.pb config");
  } catch (const std::exception& e) {
    return {std::string("its recorded config does not parse (") + e.what() + ")"};
  }
  std::vector<std::string> changes;
  for (const std::string& line : configs::describeDiff(saved, current)) {
    if (!isOperational(keyOf(line))) changes.push_back(line);
  }
  return changes;
}

namespace {

// The experiment the checkpoint was written with; refuses an unknown format.
configs::Experiment savedExperiment(const CheckpointState& state,
                                    const std::string& checkpoint_path, const std::string& where) {
  if (state.format_version != kResumableFormatVersion) {
    throw ResumeError(where + "format version " + std::to_string(state.format_version) +
                      " is not the supported " + std::to_string(kResumableFormatVersion) +
                      "; resume it with the Cumulus version that wrote it, or use --resume none");
  }
  try {
    return configs::parseExperiment(state.config_yaml, checkpoint_path + "/state.pb config");
  } catch (const std::exception& e) {
    throw ResumeError(where + "its recorded config does not parse (" + e.what() +
                      "); use --resume none to start over");
  }
}

// state.pb's integers are whatever the file holds. The trainer counts steps, epochs and the cursor
// in int64 (and computes 4 * step + level, step - start): a value past int64 would come out
// negative there, so it is refused here, naming the field.
void checkPositionRange(const CheckpointState& state, const std::string& where) {
  const std::pair<const char*, uint64_t> fields[] = {
      {"step", state.step}, {"epoch", state.epoch}, {"sampler_cursor", state.sampler_cursor}};
  for (const auto& [field, value] : fields) {
    if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      throw ResumeError(where + "state.pb " + field + " " + std::to_string(value) +
                        " is past the largest the trainer counts to (2^63 - 1); the file is "
                        "corrupt: use --resume none to start over");
    }
  }
}

// The sum of the writer's batch shares. Each comes from the file: a negative one, or a sum past
// int64 (undefined behaviour, found by tests/fuzz/checkpoint_state_fuzz.cc), is refused.
int64_t sharesSum(const std::vector<int64_t>& shares, const std::string& where) {
  int64_t sum = 0;
  for (size_t r = 0; r < shares.size(); ++r) {
    const std::string field = "state.pb batch_shares[" + std::to_string(r) + "] ";
    if (shares[r] < 0) {
      throw ResumeError(where + field + std::to_string(shares[r]) +
                        " is negative; the file is corrupt: use --resume none to start over");
    }
    if (__builtin_add_overflow(sum, shares[r], &sum)) {
      throw ResumeError(where + field + std::to_string(shares[r]) +
                        " takes the shares' sum past 2^63 - 1; the file is corrupt: use "
                        "--resume none to start over");
    }
  }
  return sum;
}

// Refuses the changes (describeDiff lines) that alter what the run computes, unless allowed.
void checkConfigChanges(const std::vector<std::string>& changes, const std::string& where,
                        bool allow_config_change) {
  std::vector<std::string> semantic;
  for (const std::string& line : changes) {
    if (!isOperational(keyOf(line))) semantic.push_back(line);
  }
  if (semantic.empty() || allow_config_change) return;
  std::string text = where + "the experiment differs from the one that wrote it in " +
                     std::to_string(semantic.size()) + (semantic.size() == 1 ? " key" : " keys") +
                     ":";
  for (const std::string& line : semantic) text += "\n  " + line;
  text += "\nrerun with --allow-config-change to continue with the new values; or " +
          std::string(kOtherExperimentChoices);
  throw ResumeError(text);
}

// Under --allow-config-change the model and optimizer must still match what the tensors are, and
// the cursor must sit on a global batch boundary.
void checkStateFits(const configs::Experiment& saved, const configs::Experiment& current,
                    const CheckpointState& state, const std::string& where) {
  if (saved.model.name != current.model.name) {
    throw ResumeError(where + "it holds a '" + saved.model.name + "' model, not '" +
                      current.model.name + "'; " + kOtherExperimentChoices);
  }
  if (saved.optimizer.name != current.optimizer.name) {
    throw ResumeError(where + "it holds '" + base::nameOf(saved.optimizer.name) +
                      "' optimizer state, not '" + base::nameOf(current.optimizer.name) +
                      "'; " + kOtherExperimentChoices);
  }
  const int64_t batch = current.trainer.global_batch_size;
  if (static_cast<int64_t>(state.sampler_cursor) % batch != 0) {
    throw ResumeError(where + "sampler cursor " + std::to_string(state.sampler_cursor) +
                      " is not a multiple of trainer.global_batch_size " + std::to_string(batch) +
                      "; resume with the global batch it was written with");
  }
}

// On fewer workers than the writer had: enough micro-batches that none holds more samples than
// the writer's largest, as far as the global batch allows. Otherwise the config's. Adds a note
// when it differs from the config's.
int64_t plannedAccumulation(const configs::Experiment& saved, const configs::Experiment& current,
                            int64_t world_size, const CheckpointState& state,
                            std::vector<std::string>& notes) {
  const int64_t k = current.trainer.grad_accumulation;
  const auto saved_world = static_cast<int64_t>(state.world_size);
  if (world_size >= saved_world) return k;
  const int64_t batch = current.trainer.global_batch_size;
  const int64_t saved_k = state.grad_accumulation > 0
                              ? static_cast<int64_t>(state.grad_accumulation)
                              : saved.trainer.grad_accumulation;
  // ceil(ceil(a / b) / c) == ceil(a / (b c)), without the product: both come from the file and
  // may be as large as 2^32 - 1 each.
  const int64_t largest_micro = ceilDiv(ceilDiv(batch, saved_world), std::max<int64_t>(1, saved_k));
  // A divisor of the global batch (configs requires equal micro-batches of a step), and no more
  // than every rank can fill.
  const int64_t needed = std::max(k, ceilDiv(ceilDiv(batch, world_size), largest_micro));
  // The smallest divisor >= needed, or else the largest one a rank can fill. Divisors come in
  // pairs (d, batch / d) with d <= sqrt(batch): the small ones are tried in ascending order and
  // the first that is >= needed is the answer; their pairs cover the rest. So a prime global batch
  // near 2^32 takes 2^16 tries, not 2^32.
  const int64_t limit = batch / world_size;
  int64_t at_least_needed = 0;  // 0: none within the limit
  int64_t largest = 1;
  for (int64_t d = 1; d <= batch / d; ++d) {
    if (batch % d != 0) continue;
    if (d <= limit) {
      largest = std::max(largest, d);
      if (d >= needed) {
        at_least_needed = d;
        break;
      }
    }
    const int64_t pair = batch / d;
    if (pair <= limit) {
      largest = std::max(largest, pair);
      if (pair >= needed && (at_least_needed == 0 || pair < at_least_needed)) {
        at_least_needed = pair;
      }
    }
  }
  const int64_t chosen = std::max(k, at_least_needed != 0 ? at_least_needed : largest);
  if (chosen != k) {
    notes.push_back("trainer.grad_accumulation " + std::to_string(k) + " -> " +
                    std::to_string(chosen) + " on " + std::to_string(world_size) +
                    " worker(s), so no micro-batch outgrows the " + std::to_string(largest_micro) +
                    " samples of the run that wrote it");
  }
  return chosen;
}

}  // namespace

ResumePlan planResume(const configs::Experiment& current, int64_t world_size,
                      const CheckpointState& state, const std::string& checkpoint_path,
                      bool allow_config_change) {
  const std::string where = "checkpoint " + checkpoint_path + ": ";
  const configs::Experiment saved = savedExperiment(state, checkpoint_path, where);
  checkPositionRange(state, where);
  const int64_t shares_sum = sharesSum(state.batch_shares, where);
  ResumePlan plan;
  plan.checkpoint_path = checkpoint_path;
  plan.config_changes = configs::describeDiff(saved, current);
  checkConfigChanges(plan.config_changes, where, allow_config_change);
  checkStateFits(saved, current, state, where);

  plan.step = static_cast<int64_t>(state.step);
  plan.sampler.epoch = static_cast<int64_t>(state.epoch);
  plan.sampler.cursor = static_cast<int64_t>(state.sampler_cursor);
  plan.samples_seen = state.samples_seen;
  plan.saved_world_size = state.world_size;
  plan.world_size_changed = static_cast<int64_t>(state.world_size) != world_size;

  plan.notes.push_back("resuming from " + checkpoint_path + " at step " +
                       std::to_string(plan.step) + " (epoch " + std::to_string(plan.sampler.epoch) +
                       ", sample " + std::to_string(plan.sampler.cursor) + " of the epoch)");
  if (plan.world_size_changed) {
    plan.notes.push_back("world size " + std::to_string(state.world_size) + " -> " +
                         std::to_string(world_size) + ": re-sharding each global batch of " +
                         std::to_string(current.trainer.global_batch_size) +
                         " from the global cursor");
  }
  plan.grad_accumulation = plannedAccumulation(saved, current, world_size, state, plan.notes);
  // The shares replay where they still fit: the writer's world, and the same global batch.
  if (!plan.world_size_changed && !state.batch_shares.empty() &&
      static_cast<int64_t>(state.batch_shares.size()) == world_size &&
      shares_sum == current.trainer.global_batch_size) {
    plan.batch_shares = state.batch_shares;
  }
  for (const std::string& line : plan.config_changes) plan.notes.push_back("config: " + line);
  return plan;
}

std::string ledgerLine(int64_t launch, int64_t epoch, int64_t step, int64_t rank,
                       const std::vector<int64_t>& indices) {
  std::ostringstream out;
  out << launch << ' ' << epoch << ' ' << step << ' ' << rank << ' ';
  for (size_t i = 0; i < indices.size(); ++i) out << (i ? "," : "") << indices[i];
  out << '\n';
  return out.str();
}

void SampleLedger::record(int64_t launch, int64_t epoch, int64_t step, int64_t rank,
                          const std::vector<int64_t>& indices) {
  records_.push_back(Record{launch, epoch, step, rank, indices});
}

void SampleLedger::readFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    std::istringstream fields(line);
    int64_t launch = -1, epoch = -1, step = -1, rank = -1;
    fields >> launch >> epoch >> step >> rank;
    if (!fields || launch < 0 || epoch < 0 || step < 0 || rank < 0) {
      throw std::runtime_error(path + ":" + std::to_string(number) +
                               ": not a ledger line \"LAUNCH EPOCH STEP RANK i,j,...\": " + line);
    }
    std::string list;
    fields >> list;  // empty for a rank with no share of a short batch
    std::vector<int64_t> indices;
    std::istringstream items(list);
    for (std::string item; std::getline(items, item, ',');) {
      const std::optional<int64_t> value = base::parseInteger(item, 0);
      if (!value) {
        throw std::runtime_error(path + ":" + std::to_string(number) + ": bad index '" + item +
                                 "'");
      }
      indices.push_back(*value);
    }
    record(launch, epoch, step, rank, indices);
  }
}

void SampleLedger::dropReplayedSteps() {
  std::map<std::pair<int64_t, int64_t>, int64_t> newest;  // (epoch, step) -> launch
  for (const Record& r : records_) {
    int64_t& launch = newest.try_emplace({r.epoch, r.step}, r.launch).first->second;
    launch = std::max(launch, r.launch);
  }
  std::vector<Record> kept;
  for (Record& r : records_) {
    if (newest.at({r.epoch, r.step}) == r.launch) kept.push_back(std::move(r));
  }
  records_ = std::move(kept);
}

std::vector<std::string> SampleLedger::checkEpoch(int64_t epoch,
                                                  const std::set<int64_t>& expected) const {
  std::map<int64_t, std::vector<std::string>> seen;  // sample -> "step S rank R" per consumption
  for (const Record& r : records_) {
    if (r.epoch != epoch) continue;
    for (int64_t index : r.indices) {
      seen[index].push_back("step " + std::to_string(r.step) + " rank " + std::to_string(r.rank));
    }
  }
  std::vector<std::string> problems;
  const std::string prefix = "epoch " + std::to_string(epoch) + ": sample ";
  for (const auto& [index, where] : seen) {
    if (!expected.count(index)) {
      problems.push_back(prefix + std::to_string(index) + " is not in the epoch (" + where[0] +
                         ")");
    } else if (where.size() > 1) {
      std::string text =
          prefix + std::to_string(index) + " consumed " + std::to_string(where.size()) + " times (";
      for (size_t i = 0; i < where.size(); ++i) text += (i ? ", " : "") + where[i];
      problems.push_back(text + ")");
    }
  }
  for (int64_t index : expected) {
    if (!seen.count(index)) problems.push_back(prefix + std::to_string(index) + " never consumed");
  }
  return problems;
}

std::set<int64_t> SampleLedger::epochs() const {
  std::set<int64_t> out;
  for (const Record& r : records_) out.insert(r.epoch);
  return out;
}

}  // namespace cumulus::trainer
