#pragma once
// StorePublisher: the RecordSink that feeds the job's live endpoint (cumulus-run --metrics-port,
// launch/job_metrics.h). The writing rank sends every metrics.jsonl record, and every rank its
// status, to the Store that cumulus-run hosts on node 0 (keys: comm/store_keys.h, "The live
// metrics"). No LibTorch here.
//
// The training thread only queues: a thread of the publisher's own talks to the Store, so a slow
// or lost Store never slows a step. The queue holds at most `max_queued` records; beyond that the
// oldest are dropped (and counted). After the first Store error the publisher says so once on
// `warnings` and stops: the endpoint then shows nothing new from this rank, and training goes on.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <iosfwd>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "comm/store.h"
#include "metrics/recorder.h"

namespace cumulus::metrics {

struct StorePublisherOptions {
  int64_t rank = 0;
  size_t max_queued = 1000;
  std::ostream* warnings = nullptr;  // null: silent
};

class StorePublisher final : public RecordSink {
 public:
  // Over a Store client the publisher owns and opens on its thread (host, port, job token).
  StorePublisher(std::string host, int port, std::string token, StorePublisherOptions options);
  // Over a caller's Store that outlives the publisher (tests).
  StorePublisher(comm::Store& store, StorePublisherOptions options);
  // Sends what is queued (bounded by the Store client's timeouts), then stops the thread.
  ~StorePublisher() override;

  void record(const nlohmann::ordered_json& record) override;
  void rankStatus(const nlohmann::ordered_json& status) override;

  // This process's rank after an in-place re-forming: its status goes to that rank's key.
  void setRank(int64_t rank);
  // Records dropped because the queue was full or the Store failed.
  int64_t dropped() const;
  // Blocks until everything queued so far was sent or dropped (tests).
  void flush();

 private:
  void start();
  void loop();
  // Sends one item; false after a Store error (said once).
  bool send(const std::string& key_or_empty, const std::string& value);

  struct Item {
    bool is_record = true;
    std::string json;
  };
  StorePublisherOptions options_;
  std::string host_;
  int port_ = 0;
  std::string token_;
  std::unique_ptr<comm::Store> owned_;
  comm::Store* store_ = nullptr;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Item> queue_;  // records and statuses, in order
  bool stopping_ = false;
  bool failed_ = false;
  int64_t dropped_ = 0;
  int64_t in_flight_ = 0;
  std::thread thread_;
};

}  // namespace cumulus::metrics
