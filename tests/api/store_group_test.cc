// ProcessGroup::overStore and GroupMember (<cumulus/process_group.h>) through the public headers
// only: a group over a Store the program implements itself, and a member read from the
// environment as torch.distributed's backend reads it.

#include <gtest/gtest.h>
#include <stdlib.h>
#include <torch/torch.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cumulus/errors.h"
#include "cumulus/process_group.h"
#include "cumulus/store.h"

namespace cumulus {
namespace {

// What a program would write: a map under a mutex, with the timeouts the contract asks for.
class MapStore final : public Store {
 public:
  void set(const std::string& key, const std::string& value) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      values_[key] = value;
    }
    changed_.notify_all();
  }
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    wait({key}, timeout);
    std::lock_guard<std::mutex> lock(mutex_);
    return values_.at(key);
  }
  std::optional<std::string> tryGet(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = values_.find(key);
    if (it == values_.end()) return std::nullopt;
    return it->second;
  }
  int64_t add(const std::string& key, int64_t delta) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = values_.find(key);
    const int64_t value = (it == values_.end() ? 0 : std::stoll(it->second)) + delta;
    values_[key] = std::to_string(value);
    changed_.notify_all();
    return value;
  }
  std::string compareSet(const std::string& key, const std::string& expected,
                         const std::string& desired) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = values_.find(key);
    const std::string current = it == values_.end() ? "" : it->second;
    if (current != expected) return current;
    values_[key] = desired;
    changed_.notify_all();
    return desired;
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mutex_);
    const bool all = changed_.wait_for(lock, timeout, [&] {
      for (const auto& key : keys)
        if (values_.count(key) == 0) return false;
      return true;
    });
    if (!all) throw CommError(CommErrorKind::kTimeout, "store", 0, -1, "keys missing");
  }
  bool remove(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return values_.erase(key) > 0;
  }
  int64_t removePrefix(const std::string&) override { return 0; }

  size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return values_.size();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
};

std::string groupErrorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const GroupError& e) {
    return e.what();
  }
  return "no GroupError";
}

TEST(ProcessGroupOverStore, AProgramsOwnStoreCarriesTheRendezvous) {
  MapStore store;
  constexpr int kWorld = 3;
  std::vector<std::vector<float>> results(kWorld);
  std::vector<std::string> errors(kWorld);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < kWorld; ++rank) {
    ranks.emplace_back([&, rank] {
      try {
        GroupMember member;
        member.rank = rank;
        member.size = kWorld;
        member.generation = 7;
        member.job_token = "a job's secret";
        GroupOptions options;
        options.algorithm = Algorithm::kRing;
        options.timeout_seconds = 60;
        auto group = ProcessGroup::overStore(store, member, options);
        EXPECT_EQ(group->rank(), rank);
        EXPECT_EQ(group->size(), kWorld);
        EXPECT_EQ(group->generation(), 7u);
        torch::Tensor t = torch::arange(4, torch::kFloat32) + 10.0f * (rank + 1);
        group->allreduce(t);
        results[rank].assign(t.data_ptr<float>(), t.data_ptr<float>() + 4);
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& r : ranks) r.join();
  for (int rank = 0; rank < kWorld; ++rank) {
    ASSERT_EQ(errors[rank], "") << "rank " << rank;
    // 10 + 20 + 30, plus 3 times 0, 1, 2, 3.
    EXPECT_EQ(results[rank], (std::vector<float>{60, 63, 66, 69})) << "rank " << rank;
  }
  EXPECT_GT(store.size(), 0u);  // the rendezvous went through the program's store
}

TEST(ProcessGroupOverStore, AGroupOfOneLeavesTheStoreAlone) {
  MapStore store;
  auto group = ProcessGroup::overStore(store, GroupMember{});
  torch::Tensor t = torch::full({2}, 5.0f);
  group->allreduce(t);
  EXPECT_EQ(t[0].item<float>(), 5.0f);
  EXPECT_EQ(store.size(), 0u);
}

TEST(ProcessGroupOverStore, ARankOutOfRangeIsAGroupError) {
  MapStore store;
  GroupMember member;
  member.rank = 3;
  member.size = 3;
  EXPECT_EQ(groupErrorOf([&] { ProcessGroup::overStore(store, member); }),
            "rank 3 is out of range for a group of 3: it must be in [0, 3)");
  EXPECT_EQ(groupErrorOf([] { GroupMember::fromEnvironment(-1, 2); }),
            "rank -1 is out of range for a group of 2: it must be in [0, 2)");
}

// Variables to set (a value) or unset (nullopt).
using Variables = std::map<std::string, std::optional<std::string>>;

// Sets variables for one test and puts the old values back.
class ScopedEnvironment {
 public:
  explicit ScopedEnvironment(const Variables& values) {
    for (const auto& [name, value] : values) {
      const char* old = ::getenv(name.c_str());
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }
  ~ScopedEnvironment() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }

 private:
  Variables saved_;
};

TEST(GroupMemberFromEnvironment, ReadsTheJobAndNotTheLauncherRanks) {
  // RANK 7 of WORLD_SIZE 2 and LOCAL_RANK 1 without LOCAL_WORLD_SIZE would each be refused if
  // they were read; the member's rank and size are the ones given.
  ScopedEnvironment env({{"RANK", "7"},
                         {"WORLD_SIZE", "2"},
                         {"LOCAL_RANK", "1"},
                         {"LOCAL_WORLD_SIZE", std::nullopt},
                         {"CUMULUS_GENERATION", "4"},
                         {"CUMULUS_JOB_TOKEN", "tok"},
                         {"CUMULUS_BIND_HOST", "127.0.0.2"},
                         {"CUMULUS_PS_ENDPOINT", "127.0.0.1:29600"}});
  const GroupMember member = GroupMember::fromEnvironment(1, 3);
  EXPECT_EQ(member.rank, 1);
  EXPECT_EQ(member.size, 3);
  EXPECT_EQ(member.generation, 4u);
  EXPECT_EQ(member.job_token, "tok");
  EXPECT_EQ(member.bind_host, "127.0.0.2");
  EXPECT_EQ(member.parameter_server, "127.0.0.1:29600");
}

TEST(GroupMemberFromEnvironment, ListensOnTheAddressThatReachesTheStore) {
  ScopedEnvironment env({{"CUMULUS_BIND_HOST", std::nullopt},
                         {"CUMULUS_STORE", std::nullopt},
                         {"MASTER_ADDR", "127.0.0.1"},
                         {"MASTER_PORT", "29500"}});
  EXPECT_EQ(GroupMember::fromEnvironment(0, 2).bind_host, "127.0.0.1");
  EXPECT_EQ(GroupMember::fromEnvironment(0, 1).bind_host, "");  // alone: no listener
}

TEST(GroupMemberFromEnvironment, AMalformedVariableIsNamed) {
  ScopedEnvironment env(Variables{{"CUMULUS_GENERATION", "-1"}});
  EXPECT_EQ(groupErrorOf([] { GroupMember::fromEnvironment(0, 2); }),
            "CUMULUS_GENERATION=-1 must be >= 0");
}

}  // namespace
}  // namespace cumulus
