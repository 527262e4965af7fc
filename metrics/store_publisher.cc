#include "metrics/store_publisher.h"

#include <ostream>
#include <utility>

#include <nlohmann/json.hpp>

#include "comm/error.h"
#include "comm/store_client.h"
#include "comm/store_keys.h"

namespace cumulus::metrics {

StorePublisher::StorePublisher(std::string host, int port, std::string token,
                               StorePublisherOptions options)
    : options_(options), host_(std::move(host)), port_(port), token_(std::move(token)) {
  start();
}

StorePublisher::StorePublisher(comm::Store& store, StorePublisherOptions options)
    : options_(options), store_(&store) {
  start();
}

StorePublisher::~StorePublisher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void StorePublisher::start() {
  thread_ = std::thread([this] { loop(); });
}

void StorePublisher::record(const nlohmann::ordered_json& record) {
  std::string json = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failed_) {
      ++dropped_;
      return;
    }
    if (queue_.size() >= options_.max_queued) {
      queue_.pop_front();
      ++dropped_;
    }
    queue_.push_back({true, std::move(json)});
  }
  changed_.notify_all();
}

void StorePublisher::rankStatus(const nlohmann::ordered_json& status) {
  std::string json = status.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failed_) return;
    // Only the newest status matters: it replaces one still waiting.
    for (Item& item : queue_) {
      if (!item.is_record) {
        item.json = std::move(json);
        return;
      }
    }
    queue_.push_back({false, std::move(json)});
  }
  changed_.notify_all();
}

void StorePublisher::setRank(int64_t rank) {
  std::lock_guard<std::mutex> lock(mutex_);
  options_.rank = rank;
}

int64_t StorePublisher::dropped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return dropped_;
}

void StorePublisher::flush() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return (queue_.empty() && in_flight_ == 0) || failed_; });
}

void StorePublisher::loop() {
  if (store_ == nullptr) {
    comm::StoreClientOptions client;
    client.connect_timeout = std::chrono::milliseconds(5000);
    client.rpc_timeout = std::chrono::milliseconds(5000);
    owned_ = std::make_unique<comm::StoreClient>(host_, port_, token_, client);
    store_ = owned_.get();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything was sent
    Item item = std::move(queue_.front());
    queue_.pop_front();
    ++in_flight_;
    const std::string key = item.is_record ? std::string() : comm::metricsRankKey(options_.rank);
    lock.unlock();
    const bool ok = send(key, item.json);
    lock.lock();
    --in_flight_;
    if (!ok) {
      failed_ = true;
      dropped_ += static_cast<int64_t>(queue_.size()) + (item.is_record ? 1 : 0);
      queue_.clear();
    }
    changed_.notify_all();
    if (failed_) return;
  }
}

bool StorePublisher::send(const std::string& key_or_empty, const std::string& value) {
  try {
    if (key_or_empty.empty()) {
      const int64_t n = store_->add(comm::metricsRecordCountKey(), 1) - 1;
      store_->set(comm::metricsRecordKey(n), value);
    } else {
      store_->set(key_or_empty, value);
    }
    return true;
  } catch (const std::exception& e) {
    if (options_.warnings != nullptr) {
      int64_t rank = 0;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        rank = options_.rank;
      }
      *options_.warnings << "warning: rank " << rank << " stops sending live metrics to the Store ("
                         << e.what() << "); training goes on, and metrics.jsonl is unchanged"
                         << std::endl;
    }
    return false;
  }
}

}  // namespace cumulus::metrics
