#include "launch/preemption_notice.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <regex>

#include "launch/options.h"

namespace cumulus::launch {
namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  size_t e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

class FileNotice final : public NoticeSource {
 public:
  explicit FileNotice(std::string path) : path_(std::move(path)) {}
  bool poll(std::string& detail) override {
    std::error_code ec;
    if (!std::filesystem::exists(path_, ec)) return false;
    detail = "notice file " + path_;
    return true;
  }
  std::string describe() const override { return "file:" + path_; }

 private:
  std::string path_;
};

// A minimal HTTP/1.0 GET with one deadline for connect, send and receive. Metadata services are
// plain HTTP on a link-local address, so no TLS, redirects or chunked encoding are needed.
class UrlNotice final : public NoticeSource {
 public:
  UrlNotice(std::string url, std::string host, int port, std::string path,
            std::chrono::milliseconds timeout)
      : url_(std::move(url)), host_(std::move(host)), port_(port), path_(std::move(path)),
        timeout_(timeout) {}

  bool poll(std::string& detail) override {
    int status = 0;
    std::string body;
    std::string error;
    if (!get(status, body, error)) {
      if (!reported_) {
        std::fprintf(stderr, "cumulus-run: warning: preemption notice %s: %s (still polling)\n",
                     url_.c_str(), error.c_str());
        reported_ = true;
      }
      return false;
    }
    return isPreemptionResponse(status, body, detail);
  }
  std::string describe() const override { return "url:" + url_; }

 private:
  bool get(int& status, std::string& body, std::string& error) {
    auto deadline = std::chrono::steady_clock::now() + timeout_;
    auto remaining = [&] {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      return static_cast<int>(std::max<int64_t>(0, ms.count()));
    };
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (int rc = ::getaddrinfo(host_.c_str(), std::to_string(port_).c_str(), &hints, &res)) {
      error = std::string("cannot resolve ") + host_ + ": " + gai_strerror(rc);
      return false;
    }
    int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int rc = fd < 0 ? -1 : ::connect(fd, res->ai_addr, res->ai_addrlen);
    ::freeaddrinfo(res);
    if (fd < 0) {
      error = std::string("socket: ") + strerror(errno);
      return false;
    }
    struct Closer {
      int fd;
      ~Closer() { ::close(fd); }
    } closer{fd};
    if (rc != 0 && errno != EINPROGRESS) {
      error = std::string("connect: ") + strerror(errno);
      return false;
    }
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, remaining()) <= 0) {
      error = "no connection within " + std::to_string(timeout_.count()) + " ms";
      return false;
    }
    int soerr = 0;
    socklen_t len = sizeof soerr;
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len);
    if (soerr != 0) {
      error = std::string("connect: ") + strerror(soerr);
      return false;
    }
    std::string request = "GET " + path_ + " HTTP/1.0\r\nHost: " + host_ +
                          "\r\nMetadata-Flavor: Google\r\nConnection: close\r\n\r\n";
    if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(request.size())) {
      error = std::string("send: ") + strerror(errno);
      return false;
    }
    std::string response;
    char buf[4096];
    for (;;) {
      pollfd r{fd, POLLIN, 0};
      if (::poll(&r, 1, remaining()) <= 0) {
        error = "no answer within " + std::to_string(timeout_.count()) + " ms";
        return false;
      }
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n < 0 && errno == EAGAIN) continue;
      if (n <= 0) break;
      response.append(buf, static_cast<size_t>(n));
      if (response.size() > (1u << 20)) {
        error = "answer larger than 1 MiB";
        return false;
      }
    }
    std::smatch m;
    if (!std::regex_search(response, m, std::regex(R"(^HTTP/\d\.\d (\d{3}))"))) {
      error = "not an HTTP response";
      return false;
    }
    status = std::stoi(m[1]);
    size_t head_end = response.find("\r\n\r\n");
    body = head_end == std::string::npos ? "" : response.substr(head_end + 4);
    return true;
  }

  std::string url_;
  std::string host_;
  int port_;
  std::string path_;
  std::chrono::milliseconds timeout_;
  bool reported_ = false;
};

}  // namespace

bool isPreemptionResponse(int status, const std::string& body, std::string& detail) {
  if (status != 200) return false;
  std::string b = trim(body);
  if (b == "TRUE") {
    detail = "GCP instance/preempted = TRUE";
    return true;
  }
  std::smatch m;
  if (std::regex_search(b, m, std::regex(R"re("action"\s*:\s*"(terminate|stop|hibernate)")re"))) {
    detail = "AWS spot/instance-action " + m[1].str();
    std::smatch t;
    if (std::regex_search(b, t, std::regex(R"re("time"\s*:\s*"([^"]*)")re"))) {
      detail += " at " + t[1].str();
    }
    return true;
  }
  return false;
}

std::unique_ptr<NoticeSource> makeNoticeSource(const std::string& spec,
                                               std::chrono::milliseconds http_timeout) {
  if (spec.rfind("file:", 0) == 0 && spec.size() > 5) {
    return std::make_unique<FileNotice>(spec.substr(5));
  }
  if (spec.rfind("url:", 0) == 0) {
    std::string url = spec.substr(4);
    std::smatch m;
    if (std::regex_match(url, m, std::regex(R"(http://(\[[^\]]+\]|[^/:]+)(?::(\d+))?(/.*)?)"))) {
      std::string host = m[1];
      if (host.front() == '[') host = host.substr(1, host.size() - 2);
      int port = m[2].matched ? std::stoi(m[2]) : 80;
      std::string path = m[3].matched ? m[3].str() : "/";
      if (port < 1 || port > 65535) throw UsageError("--preemption-notice: bad port in " + url);
      return std::make_unique<UrlNotice>(url, host, port, path, http_timeout);
    }
    throw UsageError("--preemption-notice: expected url:http://HOST[:PORT]/PATH, got \"" + spec +
                     "\" (https is not supported: metadata services are plain http)");
  }
  throw UsageError("--preemption-notice: expected file:PATH or url:http://…, got \"" + spec + "\"");
}

}  // namespace cumulus::launch
