// MetricsServer (launch/metrics_server.h): the routes a browser and Prometheus use, and what it
// does with requests it should refuse. Real HTTP over loopback sockets.
#include "launch/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "comm/memory_store.h"
#include "comm/store_keys.h"

namespace cumulus::launch {
namespace {

int connectTo(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    throw std::runtime_error("cannot connect to port " + std::to_string(port));
  }
  timeval timeout{10, 0};  // a server that never answers fails the test, not hangs it
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  return fd;
}

// Whether `reply` holds one whole response (headers and a Content-Length body).
bool complete(const std::string& reply) {
  const size_t end = reply.find("\r\n\r\n");
  if (end == std::string::npos) return false;
  const size_t at = reply.find("Content-Length: ");
  if (at == std::string::npos || at > end) return false;
  return reply.size() - end - 4 >= std::stoul(reply.substr(at + 16));
}

// Sends `request` as it is and returns the server's response: one whole response, or what it
// sent before it closed the connection.
std::string roundTrip(int port, const std::string& request) {
  const int fd = connectTo(port);
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server may close early on a request it refuses
    sent += static_cast<size_t>(n);
  }
  std::string reply;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    reply.append(buffer, static_cast<size_t>(n));
    if (complete(reply)) break;
  }
  ::close(fd);
  return reply;
}

std::string get(int port, const std::string& target, const std::string& method = "GET") {
  const char* length = method == "GET" ? "" : "Content-Length: 0\r\n";
  return roundTrip(port, method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + length +
                             "Connection: close\r\n\r\n");
}

std::string statusLine(const std::string& reply) { return reply.substr(0, reply.find("\r\n")); }
std::string body(const std::string& reply) {
  const size_t at = reply.find("\r\n\r\n");
  return at == std::string::npos ? "" : reply.substr(at + 4);
}

class MetricsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    metrics_.agentEvent("start", 0, 2);
    server_ = std::make_unique<MetricsServer>("127.0.0.1", 0, metrics_, store_);
    port_ = server_->port();
  }
  comm::MemoryStore store_;
  JobMetrics metrics_{"run-1"};
  std::unique_ptr<MetricsServer> server_;
  int port_ = 0;
};

TEST_F(MetricsServerTest, ServesMetricsStatusRecordsAndThePage) {
  // A record a worker sent, read by the poller.
  const int64_t n = store_.add(comm::metricsRecordCountKey(), 1) - 1;
  store_.set(comm::metricsRecordKey(n), R"({"type":"train","step":12,"loss":0.5})");
  server_->pollNow();

  const std::string metrics = get(port_, "/metrics");
  EXPECT_EQ(statusLine(metrics), "HTTP/1.1 200 OK");
  EXPECT_NE(metrics.find("Content-Type: text/plain; version=0.0.4; charset=utf-8"),
            std::string::npos)
      << metrics;
  EXPECT_NE(body(metrics).find("\ncumulus_step 12\n"), std::string::npos) << metrics;

  const std::string status = get(port_, "/api/status");
  EXPECT_EQ(statusLine(status), "HTTP/1.1 200 OK");
  EXPECT_EQ(nlohmann::json::parse(body(status))["step"], 12);

  const auto records = nlohmann::json::parse(body(get(port_, "/api/records?after=1")));
  EXPECT_EQ(records["next"], 2);
  ASSERT_EQ(records["records"].size(), 1u);
  EXPECT_EQ(records["records"][0]["step"], 12);

  const std::string page = get(port_, "/");
  EXPECT_EQ(statusLine(page), "HTTP/1.1 200 OK");
  EXPECT_NE(page.find("Content-Type: text/html; charset=utf-8"), std::string::npos);
  EXPECT_EQ(body(page), dashboardPage());
  // Self-contained: nothing is fetched from another host (the SVG namespace is a name, not a
  // fetch).
  std::string rest = dashboardPage();
  for (size_t at; (at = rest.find("http://www.w3.org/2000/svg")) != std::string::npos;) {
    rest.erase(at, 26);
  }
  EXPECT_EQ(rest.find("http://"), std::string::npos);
  EXPECT_EQ(rest.find("https://"), std::string::npos);
  EXPECT_EQ(rest.find("<link"), std::string::npos);
  EXPECT_EQ(rest.find("src="), std::string::npos);
}

TEST_F(MetricsServerTest, RefusesWhatItDoesNotServe) {
  EXPECT_EQ(statusLine(get(port_, "/nothing-here")), "HTTP/1.1 404 Not Found");
  EXPECT_EQ(statusLine(get(port_, "/../../etc/passwd")).substr(9, 1), "4");
  EXPECT_EQ(statusLine(get(port_, "/metrics", "POST")), "HTTP/1.1 405 Method Not Allowed");
  EXPECT_EQ(statusLine(get(port_, "/", "DELETE")), "HTTP/1.1 405 Method Not Allowed");
  const std::string bad_after = get(port_, "/api/records?after=ten");
  EXPECT_EQ(statusLine(bad_after), "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(body(bad_after), "after: expected a record number >= 0, got \"ten\"\n");
  EXPECT_EQ(statusLine(get(port_, "/api/records?after=-1")), "HTTP/1.1 400 Bad Request");
}

// Garbage, a huge header and many idle connections at once: each gets a 4xx or a closed
// connection, and a well-formed scrape is still answered.
TEST_F(MetricsServerTest, MalformedRequestsGetA4xxOrAClosedConnection) {
  const std::string garbage =
      roundTrip(port_, std::string("\x16\x03\x01\x02\x00\x01\xff\r\n\r\n", 11));
  EXPECT_TRUE(garbage.empty() || statusLine(garbage).substr(9, 1) == "4") << garbage;
  const std::string huge =
      roundTrip(port_, "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(64 * 1024, 'a') +
                           "\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(huge.empty() || statusLine(huge).substr(9, 1) == "4") << statusLine(huge);
  const std::string long_target = get(port_, "/" + std::string(20000, 'x'));
  EXPECT_TRUE(long_target.empty() || statusLine(long_target).substr(9, 1) == "4");

  std::vector<int> idle;
  for (int i = 0; i < 80; ++i) idle.push_back(connectTo(port_));
  const auto start = std::chrono::steady_clock::now();
  const std::string scrape = get(port_, "/metrics");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(statusLine(scrape), "HTTP/1.1 200 OK");
  // An idle connection holds a serving thread at most 2 s (the keep-alive limit), 64 threads
  // serve: the scrape waits at most about that long behind 64 of them.
  EXPECT_LT(seconds, 8.0);
  for (const int fd : idle) ::close(fd);
  EXPECT_EQ(statusLine(get(port_, "/metrics")), "HTTP/1.1 200 OK");
}

// A slowloris: 100 connections that each send a header line every half second and never end their
// request's head. cpp-httplib restarts its read timeout with every byte, so they used to hold all
// 64 serving threads for as long as they trickled, and a scrape waited that long. Each is closed
// two seconds after it connected (at once when its turn comes later than that), so the scrape is
// answered in about that time.
TEST_F(MetricsServerTest, SlowClientsTricklingHeadersDoNotStarveAScrape) {
  std::vector<int> slow;
  for (int i = 0; i < 100; ++i) {
    slow.push_back(connectTo(port_));
    const std::string start = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    ::send(slow.back(), start.data(), start.size(), MSG_NOSIGNAL);
  }
  std::mutex mutex;
  std::condition_variable stop_changed;
  bool stop = false;
  std::thread trickle([&] {
    std::unique_lock<std::mutex> lock(mutex);
    for (int n = 0;
         !stop_changed.wait_for(lock, std::chrono::milliseconds(500), [&] { return stop; }); ++n) {
      const std::string line = "X-Slow-" + std::to_string(n) + ": 1\r\n";
      for (const int fd : slow) ::send(fd, line.data(), line.size(), MSG_NOSIGNAL);
    }
  });
  const auto start = std::chrono::steady_clock::now();
  const std::string scrape = get(port_, "/metrics");  // gives up after 10 s without an answer
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  {
    std::lock_guard<std::mutex> lock(mutex);
    stop = true;
  }
  stop_changed.notify_all();
  trickle.join();
  EXPECT_EQ(statusLine(scrape), "HTTP/1.1 200 OK");
  EXPECT_LT(seconds, 8.0);
  // The server closed every slow connection (after a 4xx at most), without waiting for its head.
  for (const int fd : slow) {
    std::string reply;
    char buffer[4096];
    ssize_t n;
    while ((n = ::recv(fd, buffer, sizeof buffer, 0)) > 0) {
      reply.append(buffer, static_cast<size_t>(n));
    }
    EXPECT_TRUE(n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) << "still open";
    EXPECT_TRUE(reply.empty() || statusLine(reply).substr(9, 1) == "4") << statusLine(reply);
    ::close(fd);
  }
}

TEST_F(MetricsServerTest, APortInUseNamesTheFlag) {
  try {
    MetricsServer second("127.0.0.1", port_, metrics_, store_);
    FAIL() << "a second server on port " << port_ << " started";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "--metrics-port " + std::to_string(port_) +
                  ": cannot listen on 127.0.0.1:" + std::to_string(port_) +
                  " (the port is in use, or the address is not this machine's); pick another "
                  "port, or 0 to serve no metrics");
  }
}

// Inside <script>, "</script" would end the script and "<!--" followed by "<script" would make
// the rest of the page script data: the data holds no "<" at all (nor ">", "&", U+2028), and
// parses back to the same strings.
TEST(DashboardReportTest, BuildsTheDataIntoThePageWithoutMarkupInIt) {
  const nlohmann::json data = {
      {"records", {{{"type", "note"}, {"text", "<!--<script></script><b>&\u2028"}}}},
      {"status", nullptr}};
  const std::string page = dashboardReport(data);
  EXPECT_EQ(page.find("const CUMULUS_EMBEDDED = null;"), std::string::npos);
  const std::string expected =
      R"({"records":[{"text":"\u003c!--\u003cscript\u003e\u003c/script\u003e\u003cb\u003e\u0026)"
      R"(\u2028","type":"note"}],"status":null})";
  EXPECT_NE(page.find("const CUMULUS_EMBEDDED = " + expected + ";"), std::string::npos);
  EXPECT_EQ(page.size(), dashboardPage().size() - 4 + expected.size());
  EXPECT_EQ(nlohmann::json::parse(expected), data);
}

}  // namespace
}  // namespace cumulus::launch
