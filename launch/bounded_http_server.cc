#include "launch/bounded_http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>

namespace cumulus::launch {
namespace {

using Clock = std::chrono::steady_clock;

// When the connection that the job running on this thread serves was accepted. cpp-httplib hands
// process_and_close_socket the socket alone; its accept loop enqueues each connection right after
// accept(2), so StampingPool notes the time there and sets this before it runs the job.
thread_local Clock::time_point t_accepted_at;

class StampingPool final : public httplib::TaskQueue {
 public:
  explicit StampingPool(size_t threads) : pool_(threads) {}
  void enqueue(std::function<void()> fn) override {
    pool_.enqueue([fn = std::move(fn), at = Clock::now()] {
      t_accepted_at = at;
      fn();
    });
  }
  void shutdown() override { pool_.shutdown(); }

 private:
  httplib::ThreadPool pool_;
};

// Waits until `fd` has `events` or `deadline` passes; a passed deadline still looks once, so what
// a client already sent is read.
bool waitFor(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{fd, events, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
    if (ready < 0 && errno == EINTR) continue;
    return ready > 0;
  }
}

void addressOf(const sockaddr_storage& address, std::string& ip, int& port) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(address);
    ::inet_ntop(AF_INET, &in.sin_addr, text, sizeof text);
    port = ntohs(in.sin_port);
  } else if (address.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(address);
    ::inet_ntop(AF_INET6, &in6.sin6_addr, text, sizeof text);
    port = ntohs(in6.sin6_port);
  }
  ip = text;
}

// One accepted connection as cpp-httplib's Stream, every read and write held to a deadline.
class Connection final : public httplib::Stream {
 public:
  Connection(int fd, const BoundedHttpServer::Limits& limits) : fd_(fd), limits_(limits) {}

  // A request whose head (and body) must be in by `deadline`.
  void startRequest(Clock::time_point deadline) {
    read_deadline_ = deadline;
    request_bytes_ = 0;
    answering_ = false;
    status_seen_ = false;
    refused_ = false;
  }
  // Whether the request just served went wrong: a read failed (its deadline or byte limit passed,
  // the client went away) or the answer refuses a malformed request (400, 414). cpp-httplib would
  // read the next request on the same connection, and a client that trickles bytes would hold
  // the thread request after request.
  bool failed() const { return read_failed_ || refused_; }
  // Whether the next request starts by `deadline`.
  bool nextRequestBy(Clock::time_point deadline) const {
    return begin_ < end_ || waitFor(fd_, POLLIN, deadline);
  }

  bool is_readable() const override {
    return begin_ < end_ || waitFor(fd_, POLLIN, read_deadline_);
  }
  bool is_writable() const override { return waitFor(fd_, POLLOUT, answerDeadline()); }

  ssize_t read(char* ptr, size_t size) override {
    if (request_bytes_ >= limits_.request_bytes) return fail();
    if (begin_ == end_) {
      if (!waitFor(fd_, POLLIN, read_deadline_)) return fail();
      ssize_t n;
      do {
        n = ::recv(fd_, buffer_, sizeof buffer_, 0);
      } while (n < 0 && errno == EINTR);
      if (n < 0) return fail();
      if (n == 0) {
        read_failed_ = true;  // end of file: nothing more to serve
        return 0;
      }
      begin_ = 0;
      end_ = static_cast<size_t>(n);
    }
    const size_t take = std::min({size, end_ - begin_, limits_.request_bytes - request_bytes_});
    std::copy(buffer_ + begin_, buffer_ + begin_ + take, ptr);
    begin_ += take;
    request_bytes_ += take;
    return static_cast<ssize_t>(take);
  }

  ssize_t write(const char* ptr, size_t size) override {
    // An answer starts with its status line, which cpp-httplib writes in one piece.
    if (!status_seen_) {
      status_seen_ = true;
      const std::string start(ptr, std::min<size_t>(size, 12));
      refused_ = start == "HTTP/1.1 400" || start == "HTTP/1.1 414";
    }
    if (!waitFor(fd_, POLLOUT, answerDeadline())) return -1;
    ssize_t n;
    do {
      n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage address{};
    socklen_t length = sizeof address;
    if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
      addressOf(address, ip, port);
    }
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage address{};
    socklen_t length = sizeof address;
    if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
      addressOf(address, ip, port);
    }
  }
  socket_t socket() const override { return fd_; }

 private:
  // The answer's deadline starts with its first write.
  Clock::time_point answerDeadline() const {
    if (!answering_) {
      answering_ = true;
      answer_deadline_ = Clock::now() + limits_.answer;
    }
    return answer_deadline_;
  }

  ssize_t fail() {
    read_failed_ = true;
    return -1;
  }

  int fd_;
  const BoundedHttpServer::Limits& limits_;
  Clock::time_point read_deadline_;
  bool read_failed_ = false;
  bool status_seen_ = false;
  bool refused_ = false;
  size_t request_bytes_ = 0;
  mutable bool answering_ = false;
  mutable Clock::time_point answer_deadline_;
  char buffer_[4096];
  size_t begin_ = 0;
  size_t end_ = 0;
};

}  // namespace

BoundedHttpServer::BoundedHttpServer(size_t threads, Limits limits) : limits_(limits) {
  new_task_queue = [threads] { return new StampingPool(threads); };
}

int BoundedHttpServer::bind(const std::string& host, int port) {
  const int bound = port == 0 ? bind_to_any_port(host) : (bind_to_port(host, port) ? port : -1);
  // listen(2) again on a listening socket sets its queue's length.
  if (bound > 0 && ::listen(svr_sock_, kBacklog) != 0) return -1;
  return bound;
}

void BoundedHttpServer::shutDown() {
  const socket_t sock = svr_sock_.exchange(INVALID_SOCKET);
  if (sock == INVALID_SOCKET) return;
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
}

bool BoundedHttpServer::process_and_close_socket(socket_t sock) {
  const Clock::time_point accepted =
      t_accepted_at == Clock::time_point{} ? Clock::now() : t_accepted_at;
  Connection connection(sock, limits_);
  bool ok = false;
  Clock::time_point start = accepted;
  for (size_t served = 1; svr_sock_ != INVALID_SOCKET; ++served) {
    connection.startRequest(start + limits_.request);
    const bool last =
        served >= limits_.requests_per_connection || Clock::now() - accepted >= limits_.lifetime;
    bool closed = false;
    ok = process_request(connection, last, closed, nullptr);
    if (!ok || closed || last || connection.failed()) break;
    if (!connection.nextRequestBy(Clock::now() + limits_.idle)) break;
    start = Clock::now();
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

}  // namespace cumulus::launch
