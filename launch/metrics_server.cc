#include "launch/metrics_server.h"

#include <httplib.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <stdexcept>
#include <utility>

#include "comm/store.h"
#include "launch/bounded_http_server.h"

namespace cumulus::launch {
namespace {

constexpr int64_t kMaxRecordsPerAnswer = 1000;
constexpr size_t kServingThreads = 64;

void noCache(httplib::Response& response) {
  response.set_header("Cache-Control", "no-store");
  response.set_header("X-Content-Type-Options", "nosniff");
}

}  // namespace

MetricsServer::MetricsServer(const std::string& host, int port, JobMetrics& metrics,
                             comm::Store& store)
    : metrics_(metrics),
      store_(store),
      // A connection holds a serving thread while it is open (idle keep-alive included): enough
      // of them for Prometheus and a few browsers, and short limits for the rest, a slow client's
      // included (launch/bounded_http_server.h).
      server_(std::make_unique<BoundedHttpServer>(kServingThreads, BoundedHttpServer::Limits{})) {
  httplib::Server& s = *server_;
  s.set_payload_max_length(4096);
  // SO_REUSEADDR only: cpp-httplib's default adds SO_REUSEPORT, which would let a second
  // listener share a port in use instead of failing.
  s.set_socket_options([](int fd) {
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  s.Get("/", [](const httplib::Request&, httplib::Response& response) {
    noCache(response);
    response.set_content(dashboardPage(), "text/html; charset=utf-8");
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& response) {
    noCache(response);
    response.set_content(metrics_.prometheus(), "text/plain; version=0.0.4; charset=utf-8");
  });
  s.Get("/api/status", [this](const httplib::Request&, httplib::Response& response) {
    noCache(response);
    response.set_content(
        metrics_.status().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
        "application/json");
  });
  s.Get("/api/records", [this](const httplib::Request& request, httplib::Response& response) {
    noCache(response);
    int64_t after = 0;
    if (request.has_param("after")) {
      const std::string text = request.get_param_value("after");
      size_t used = 0;
      try {
        after = std::stoll(text, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (text.empty() || used != text.size() || after < 0) {
        response.status = 400;
        response.set_content("after: expected a record number >= 0, got \"" + text + "\"\n",
                             "text/plain; charset=utf-8");
        return;
      }
    }
    response.set_content(metrics_.records(after, kMaxRecordsPerAnswer)
                             .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                         "application/json");
  });
  const auto refuse = [](const httplib::Request&, httplib::Response& response) {
    response.status = 405;
    response.set_header("Allow", "GET, HEAD");
  };
  s.Post(".*", refuse);
  s.Put(".*", refuse);
  s.Patch(".*", refuse);
  s.Delete(".*", refuse);
  s.Options(".*", refuse);
  port_ = server_->bind(host, port);
  if (port_ <= 0) {
    throw std::runtime_error(
        "--metrics-port " + std::to_string(port) + ": cannot listen on " + host + ":" +
        std::to_string(port) +
        " (the port is in use, or the address is not this machine's); pick another "
        "port, or 0 to serve no metrics");
  }
  listener_ = std::thread([this] { serve(); });
  poller_ = std::thread([this] { pollLoop(); });
}

MetricsServer::~MetricsServer() {
  {
    base::MutexLock lock(mutex_);
    stopping_ = true;
  }
  stop_changed_.notify_all();
  poller_.join();
  pollNow();
  server_->shutDown();  // cpp-httplib's stop() misses a listener that has not begun its loop yet
  listener_.join();
}

void MetricsServer::serve() { server_->listen_after_bind(); }

void MetricsServer::pollNow() {
  base::MutexLock lock(poll_mutex_);
  try {
    metrics_.poll(store_);
  } catch (const std::exception&) {
    // The Store is node 0's own; while it is down there is nothing new to show. Tried again at
    // the next poll.
  }
}

void MetricsServer::pollLoop() {
  base::MutexLock lock(mutex_);
  while (!stopping_) {
    lock.unlock();
    pollNow();
    lock.lock();
    stop_changed_.wait_for(lock, std::chrono::milliseconds(250),
                           [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return stopping_; });
  }
}

Exposure exposureOf(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return Exposure::kNetwork;
  Exposure exposure = Exposure::kThisMachine;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    bool any = false;
    bool loopback = false;
    if (a->ai_family == AF_INET) {
      const uint32_t address =
          ntohl(reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr.s_addr);
      any = address == INADDR_ANY;
      loopback = (address >> 24) == 127;
    } else if (a->ai_family == AF_INET6) {
      const in6_addr& address = reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr;
      any = IN6_IS_ADDR_UNSPECIFIED(&address);
      loopback = IN6_IS_ADDR_LOOPBACK(&address);
    }
    if (any) {
      exposure = Exposure::kEveryAddress;
      break;
    }
    if (!loopback) exposure = Exposure::kNetwork;
  }
  ::freeaddrinfo(found);
  return exposure;
}

std::string scriptSafeJson(const nlohmann::json& data) {
  const std::string json = data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  // Inside <script>, "</script" ends the script and "<!--" followed by "<script" makes the rest of
  // the page script data, whatever JSON's quotes say. So no "<" at all: these characters can only
  // stand inside JSON strings, where \uXXXX is the same character to JSON.parse and to JavaScript.
  // U+2028 and U+2029 end a line in JavaScript before ES2019.
  std::string escaped;
  escaped.reserve(json.size());
  for (size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (c == '<') {
      escaped += "\\u003c";
    } else if (c == '>') {
      escaped += "\\u003e";
    } else if (c == '&') {
      escaped += "\\u0026";
    } else if (c == '\xe2' && i + 2 < json.size() && json[i + 1] == '\x80' &&
               (json[i + 2] == '\xa8' || json[i + 2] == '\xa9')) {
      escaped += json[i + 2] == '\xa8' ? "\\u2028" : "\\u2029";
      i += 2;
    } else {
      escaped += c;
    }
  }
  return escaped;
}

std::string dashboardReport(const nlohmann::json& data) {
  const std::string escaped = scriptSafeJson(data);
  const std::string& page = dashboardPage();
  const std::string marker = "const CUMULUS_EMBEDDED = null;";
  const size_t at = page.find(marker);
  if (at == std::string::npos) throw std::logic_error("the dashboard page has no data line");
  return page.substr(0, at) + "const CUMULUS_EMBEDDED = " + escaped + ";" +
         page.substr(at + marker.size());
}

}  // namespace cumulus::launch
