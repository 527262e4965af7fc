#include "comm/store_server.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>

#include "base/integer.h"
#include "comm/rpc_common.h"
#include "comm/store_service.h"
#include "proto/store.grpc.pb.h"

namespace cumulus::comm {

namespace {
using Clock = std::chrono::steady_clock;
// A blocked handler re-checks cancellation and shutdown at least this often.
constexpr auto kWaitPollInterval = std::chrono::milliseconds(50);
}  // namespace

class StoreService final : public proto::Store::Service {
 public:
  explicit StoreService(std::string token) : token_(std::move(token)) {}

  void shutdown() {
    base::MutexLock lock(mutex_);
    shutting_down_ = true;
    changed_.notify_all();
  }

  grpc::Status Set(grpc::ServerContext* context, const proto::SetRequest* request,
                   proto::SetResponse*) override {
    return guarded(*context, [&] {
      if (auto status = checkKey(request->key()); !status.ok()) return status;
      if (request->value().size() > StoreServer::kMaxValueBytes) return tooLarge(request->key());
      base::MutexLock lock(mutex_);
      data_[request->key()] = request->value();
      changed_.notify_all();
      return grpc::Status::OK;
    });
  }

  grpc::Status Get(grpc::ServerContext* context, const proto::GetRequest* request,
                   proto::GetResponse* response) override {
    return guarded(*context, [&] {
      if (auto status = checkKey(request->key()); !status.ok()) return status;
      base::MutexLock lock(mutex_);
      const bool ready = waitUntil(
          lock, *context, request->wait_ms(),
          [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return data_.count(request->key()) > 0; });
      if (shutting_down_) return shuttingDown();
      if (ready) {
        response->set_found(true);
        response->set_value(data_.at(request->key()));
      }
      return grpc::Status::OK;
    });
  }

  grpc::Status Add(grpc::ServerContext* context, const proto::AddRequest* request,
                   proto::AddResponse* response) override {
    return guarded(*context, [&] {
      if (auto status = checkKey(request->key()); !status.ok()) return status;
      base::MutexLock lock(mutex_);
      int64_t value = 0;
      auto it = data_.find(request->key());
      if (it != data_.end() && !parseInt(it->second, &value))
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "key '" + request->key() + "' holds a non-integer value");
      if (__builtin_add_overflow(value, request->delta(), &value))
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "adding " + std::to_string(request->delta()) + " to key '" +
                                request->key() + "' overflows a 64-bit integer");
      data_[request->key()] = std::to_string(value);
      changed_.notify_all();
      response->set_value(value);
      return grpc::Status::OK;
    });
  }

  grpc::Status CompareSet(grpc::ServerContext* context, const proto::CompareSetRequest* request,
                          proto::CompareSetResponse* response) override {
    return guarded(*context, [&] {
      if (auto status = checkKey(request->key()); !status.ok()) return status;
      if (request->desired().size() > StoreServer::kMaxValueBytes) return tooLarge(request->key());
      base::MutexLock lock(mutex_);
      auto it = data_.find(request->key());
      const bool matches =
          it == data_.end() ? request->expected().empty() : it->second == request->expected();
      if (matches) {
        data_[request->key()] = request->desired();
        changed_.notify_all();
        response->set_value(request->desired());
      } else if (it != data_.end()) {
        response->set_value(it->second);
      }
      return grpc::Status::OK;
    });
  }

  grpc::Status Wait(grpc::ServerContext* context, const proto::WaitRequest* request,
                    proto::WaitResponse* response) override {
    return guarded(*context, [&] {
      for (const auto& key : request->keys())
        if (auto status = checkKey(key); !status.ok()) return status;
      base::MutexLock lock(mutex_);
      auto allPresent = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
        for (const auto& key : request->keys())
          if (!data_.count(key)) return false;
        return true;
      };
      waitUntil(lock, *context, request->wait_ms(), allPresent);
      if (shutting_down_) return shuttingDown();
      for (const auto& key : request->keys())
        if (!data_.count(key)) response->add_missing(key);
      return grpc::Status::OK;
    });
  }

  grpc::Status Delete(grpc::ServerContext* context, const proto::DeleteRequest* request,
                      proto::DeleteResponse* response) override {
    return guarded(*context, [&] {
      base::MutexLock lock(mutex_);
      response->set_existed(data_.erase(request->key()) > 0);
      return grpc::Status::OK;
    });
  }

  grpc::Status DeletePrefix(grpc::ServerContext* context, const proto::DeletePrefixRequest* request,
                            proto::DeletePrefixResponse* response) override {
    return guarded(*context, [&] {
      base::MutexLock lock(mutex_);
      const std::string& prefix = request->prefix();
      int64_t removed = 0;
      // std::map keeps keys sorted, so the prefix is one contiguous range.
      auto it = data_.lower_bound(prefix);
      while (it != data_.end() && it->first.compare(0, prefix.size(), prefix) == 0) {
        it = data_.erase(it);
        ++removed;
      }
      response->set_removed(removed);
      return grpc::Status::OK;
    });
  }

 private:
  // Token check, then `body`; no exception leaves a handler.
  grpc::Status guarded(const grpc::ServerContext& context,
                       const std::function<grpc::Status()>& body) {
    if (auto status = rpc::checkToken(context, token_); !status.ok()) return status;
    {
      base::MutexLock lock(mutex_);
      if (shutting_down_) return shuttingDown();
    }
    try {
      return body();
    } catch (const std::exception& e) {
      return grpc::Status(grpc::StatusCode::INTERNAL, std::string("store server: ") + e.what());
    } catch (...) {
      return grpc::Status(grpc::StatusCode::INTERNAL, "store server: unknown exception");
    }
  }

  // Waits on `changed_` until `ready()`, the request's wait (ms), the client's deadline or
  // cancellation, or shutdown. Returns ready().
  bool waitUntil(base::MutexLock& lock, const grpc::ServerContext& context, int64_t wait_ms,
                 const std::function<bool()>& ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    const auto requested =
        Clock::now() + std::chrono::milliseconds(std::clamp<int64_t>(wait_ms, 0, rpc::kMaxWaitMs));
    const auto deadline = std::min(requested, rpc::steadyDeadline(context));
    ++blocked_;
    bool done = ready();
    while (!done && !shutting_down_ && !context.IsCancelled()) {
      const auto now = Clock::now();
      if (now >= deadline) break;
      changed_.wait_until(lock, std::min(deadline, now + kWaitPollInterval));
      done = ready();
    }
    --blocked_;
    return done;
  }

 public:
  int blocked() {
    base::MutexLock lock(mutex_);
    return blocked_;
  }

 private:
  static grpc::Status checkKey(const std::string& key) {
    if (key.size() <= StoreServer::kMaxKeyBytes) return grpc::Status::OK;
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "key of " + std::to_string(key.size()) + " bytes exceeds the limit of " +
                            std::to_string(StoreServer::kMaxKeyBytes));
  }
  static grpc::Status tooLarge(const std::string& key) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "value for key '" + key + "' exceeds the limit of " +
                            std::to_string(StoreServer::kMaxValueBytes) + " bytes");
  }
  static grpc::Status shuttingDown() {
    return grpc::Status(grpc::StatusCode::ABORTED, "store server shutting down");
  }
  static bool parseInt(const std::string& text, int64_t* value) {
    const std::optional<int64_t> parsed = base::parseInteger(text);
    if (parsed) *value = *parsed;
    return parsed.has_value();
  }

  const std::string token_;
  base::Mutex mutex_;
  base::CondVar changed_ ABSL_GUARDED_BY(mutex_);  // for its predicates
  std::map<std::string, std::string> data_ ABSL_GUARDED_BY(mutex_);
  bool shutting_down_ ABSL_GUARDED_BY(mutex_) = false;
  int blocked_ ABSL_GUARDED_BY(mutex_) = 0;  // handlers inside waitUntil
};

std::unique_ptr<proto::Store::Service> makeStoreService(const std::string& token) {
  return std::make_unique<StoreService>(token);
}

StoreServer::StoreServer(const std::string& host, int port, const std::string& token)
    : host_(host.empty() ? "127.0.0.1" : host), service_(std::make_unique<StoreService>(token)) {
  server_ = rpc::startServer("store server", host_, port, service_.get(),
                             static_cast<int>(kMaxValueBytes + rpc::kMessageSlackBytes), &port_);
}

StoreServer::~StoreServer() { shutdown(); }

int StoreServer::blockedCalls() const { return service_->blocked(); }

void StoreServer::shutdown() {
  base::MutexLock lock(shutdown_mutex_);
  if (!server_) return;
  service_->shutdown();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_->Wait();
  server_.reset();
}

}  // namespace cumulus::comm
