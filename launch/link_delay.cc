// cumulus-link-delay: a delay line in user space for the namespace cluster
// (launch/netns-cluster.sh --delay) on kernels without the netem qdisc.
//
//   cumulus-link-delay --delay 20ms [--device cmdly] [--mark 45] [--limit-mib 64] [--pidfile FILE]
//                      NETNS…
//
// In each host namespace NETNS (a name under /var/run/netns, or a path), the script has made a
// tun device DEVICE and a route that sends every packet for the cluster's subnet into it. This
// reads each packet there, holds it DELAY and then sends it on through the host's own link with a
// raw socket marked MARK, which the host's routing rule lets past the tun. So a packet from host i
// to host j is held once, at i: the one-way delay is DELAY and a round trip twice that. Packets
// keep their order. The link's shaping (tbf on eth0) applies after the hold, as it does to netem
// under tbf; when tbf's queue is full a packet waits at the head of the line instead of being
// dropped, so the line's queue is the bottleneck's buffer, like netem's.
//
// Attaches to every device, writes its pid to FILE (if given) and then goes on in the background:
// the command returns 0 once the line carries packets, or 1 with the reason if any device cannot
// be attached. It stops on SIGTERM; the script's `down` kills it with the switch namespace's
// other processes. Linux only; needs CAP_NET_ADMIN.

#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <fstream>
#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/command_line.h"

namespace cumulus::launch {
namespace {

constexpr const char* kProgram = "cumulus-link-delay";

int64_t nowNs() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

// "20ms", "0.1ms", "500us", "1s" → nanoseconds.
int64_t parseDelay(const std::string& text) {
  static const std::regex form(R"(([0-9]+(\.[0-9]+)?)(us|ms|s))");
  std::smatch m;
  if (!std::regex_match(text, m, form)) {
    throw base::UsageError("--delay: expected a time like 20ms, 0.5ms or 800us, got \"" + text +
                           "\"");
  }
  const double unit = m[3] == "us" ? 1e3 : m[3] == "ms" ? 1e6 : 1e9;
  const double ns = std::stod(m[1]) * unit;
  if (ns > 10e9) throw base::UsageError("--delay: at most 10s, got \"" + text + "\"");
  return static_cast<int64_t>(ns + 0.5);
}

std::string errnoText(const std::string& what) { return what + ": " + std::strerror(errno); }

struct Packet {
  int64_t due_ns;
  std::vector<uint8_t> bytes;
};

// One host's line: its tun device, the raw socket that sends past it, and the packets held.
struct Line {
  std::string netns;
  int tun = -1;
  int raw = -1;
  std::deque<Packet> held;
  size_t held_bytes = 0;
};

// Enters `netns`, attaches to its tun `device`, opens the marked raw socket there, and comes back
// to the namespace `home` (an fd of /proc/self/ns/net).
Line attach(const std::string& netns, const std::string& device, int mark, int home) {
  Line line;
  line.netns = netns;
  const std::string path = netns.find('/') == std::string::npos ? "/var/run/netns/" + netns : netns;
  // O_NONBLOCK: a FIFO at that path would hold open(2) until a writer came; setns refuses it.
  const int ns = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (ns < 0) throw std::runtime_error(errnoText("cannot open network namespace " + path));
  if (::setns(ns, CLONE_NEWNET) != 0) {
    ::close(ns);
    throw std::runtime_error(errnoText("cannot enter network namespace " + path));
  }
  ::close(ns);
  std::string failure;
  line.tun = ::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (line.tun < 0) {
    failure = errnoText("cannot open /dev/net/tun");
  } else {
    ifreq req{};
    req.ifr_flags = IFF_TUN | IFF_NO_PI;
    std::snprintf(req.ifr_name, IFNAMSIZ, "%s", device.c_str());
    if (::ioctl(line.tun, TUNSETIFF, &req) != 0) {
      failure = errnoText("cannot attach to tun device " + device + " in " + netns);
    }
  }
  if (failure.empty()) {
    line.raw = ::socket(AF_INET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_RAW);
    const int on = 1, buffer = 4 << 20;
    if (line.raw < 0 || ::setsockopt(line.raw, SOL_SOCKET, SO_MARK, &mark, sizeof mark) != 0 ||
        // Without IP_RECVERR a full qdisc's drop is not reported, and the packet would be lost.
        ::setsockopt(line.raw, IPPROTO_IP, IP_RECVERR, &on, sizeof on) != 0 ||
        ::setsockopt(line.raw, SOL_SOCKET, SO_SNDBUF, &buffer, sizeof buffer) != 0) {
      failure = errnoText("cannot open the marked raw socket in " + netns);
    }
  }
  if (::setns(home, CLONE_NEWNET) != 0) failure = errnoText("cannot return to this namespace");
  if (!failure.empty()) throw std::runtime_error(failure);
  return line;
}

volatile std::sig_atomic_t stop_requested = 0;
void onTerm(int) { stop_requested = 1; }

// Reads what the tun has; each packet is due `delay_ns` from now. Beyond `limit` bytes held, a
// packet is dropped, as a full netem queue would.
void take(Line& line, int64_t delay_ns, size_t limit) {
  uint8_t buffer[65536];
  for (int i = 0; i < 256; ++i) {
    const ssize_t n = ::read(line.tun, buffer, sizeof buffer);
    if (n <= 0) return;
    if ((buffer[0] >> 4) != 4 || n < 20) continue;  // IPv4 only: the cluster has nothing else
    if (line.held_bytes + static_cast<size_t>(n) > limit) continue;
    line.held.push_back(Packet{nowNs() + delay_ns, std::vector<uint8_t>(buffer, buffer + n)});
    line.held_bytes += static_cast<size_t>(n);
  }
}

// Sends every packet that is due; returns false when the link's queue is full (try again soon).
bool give(Line& line, int64_t now) {
  while (!line.held.empty() && line.held.front().due_ns <= now) {
    const Packet& p = line.held.front();
    sockaddr_in to{};
    to.sin_family = AF_INET;
    std::memcpy(&to.sin_addr, p.bytes.data() + 16, 4);
    const ssize_t sent = ::sendto(line.raw, p.bytes.data(), p.bytes.size(), 0,
                                  reinterpret_cast<const sockaddr*>(&to), sizeof to);
    if (sent < 0 && (errno == ENOBUFS || errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    // Any other failure (no route, the peer unreachable) loses the packet, as a wire would.
    line.held_bytes -= p.bytes.size();
    line.held.pop_front();
  }
  return true;
}

// Clears the raw socket's error queue (ICMP errors that IP_RECVERR keeps).
void drainErrors(int fd) {
  uint8_t buffer[2048];
  while (::recv(fd, buffer, sizeof buffer, MSG_ERRQUEUE | MSG_DONTWAIT) >= 0) {
  }
}

int serve(std::vector<Line>& lines, int64_t delay_ns, size_t limit) {
  std::vector<pollfd> fds;
  for (const Line& line : lines) {
    fds.push_back(pollfd{line.tun, POLLIN, 0});
    fds.push_back(pollfd{line.raw, 0, 0});  // POLLERR only
  }
  while (!stop_requested) {
    int64_t now = nowNs(), next = -1;
    for (Line& line : lines) {
      const bool flowing = give(line, now);
      int64_t wake = -1;
      if (!flowing) {
        wake = now + 200000;  // tbf drains a frame in well under a millisecond
      } else if (!line.held.empty()) {
        wake = line.held.front().due_ns;
      }
      if (wake >= 0 && (next < 0 || wake < next)) next = wake;
    }
    timespec timeout{};
    if (next >= 0) {
      const int64_t wait = std::max<int64_t>(0, next - now);
      timeout.tv_sec = wait / 1000000000;
      timeout.tv_nsec = wait % 1000000000;
    }
    const int ready = ::ppoll(fds.data(), fds.size(), next >= 0 ? &timeout : nullptr, nullptr);
    if (ready < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    for (size_t i = 0; i < lines.size(); ++i) {
      if (fds[2 * i].revents & (POLLERR | POLLHUP | POLLNVAL)) return 1;  // the device is gone
      if (fds[2 * i].revents & POLLIN) take(lines[i], delay_ns, limit);
      if (fds[2 * i + 1].revents & POLLERR) drainErrors(lines[i].raw);
    }
  }
  return 0;
}

int run(int argc, char** argv) {
  CLI::App app{"Holds every packet a namespace host sends for a fixed time (netns-cluster.sh).",
               kProgram};
  base::setUpCommandLine(app,
                         "0 the line runs in the background, 1 a device could not be attached "
                         "(the reason is on stderr), 2 usage");
  std::string delay_text, pidfile, device = "cmdly";
  int64_t mark = 45, limit_mib = 64;
  std::vector<std::string> namespaces;
  app.add_option("--delay", delay_text, "one-way delay: 20ms, 0.5ms, 800us")
      ->type_name("TIME")
      ->required();
  app.add_option("--pidfile", pidfile, "where the background process writes its pid")
      ->type_name("FILE")
      ->transform(base::nonEmpty("FILE"));
  app.add_option("--device", device, "the tun device's name in each namespace (default cmdly)")
      ->type_name("NAME");
  app.add_option("--mark", mark, "the mark the hosts' routing rule lets past the tun (default 45)")
      ->type_name("N")
      ->transform(base::integerIn(1, 0x7fffffff));
  app.add_option("--limit-mib", limit_mib, "MiB held per host before packets drop (default 64)")
      ->type_name("N")
      ->transform(base::integerIn(1, 4096));
  app.add_option("netns", namespaces, "host network namespaces: names or paths")
      ->type_name("NETNS")
      ->required();
  if (!base::parseCommandLine(app, argc, argv)) return 0;
  const int64_t delay_ns = parseDelay(delay_text);

  // The parent returns once the child has attached everything, or says why it could not.
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) throw std::runtime_error(errnoText("pipe"));
  const pid_t child = ::fork();
  if (child < 0) throw std::runtime_error(errnoText("fork"));
  if (child > 0) {
    ::close(report[1]);
    std::string said;
    char buffer[512];
    for (ssize_t n; (n = ::read(report[0], buffer, sizeof buffer)) > 0;) said.append(buffer, n);
    if (said == "ok") return 0;
    throw std::runtime_error(said.empty() ? "the background process died before it was ready"
                                          : said);
  }
  ::close(report[0]);
  ::setsid();
  std::signal(SIGTERM, onTerm);
  std::signal(SIGINT, onTerm);
  std::vector<Line> lines;
  try {
    const int home = ::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (home < 0) throw std::runtime_error(errnoText("cannot open /proc/self/ns/net"));
    for (const std::string& ns : namespaces) {
      lines.push_back(attach(ns, device, static_cast<int>(mark), home));
    }
    ::close(home);
    if (!pidfile.empty()) {
      std::ofstream out(pidfile);
      out << ::getpid() << "\n";
      if (!out.flush()) throw std::runtime_error("cannot write the pid file " + pidfile);
    }
  } catch (const std::exception& e) {
    const std::string what = e.what();
    (void)!::write(report[1], what.data(), what.size());
    ::_exit(1);
  }
  const int null = ::open("/dev/null", O_RDWR);
  if (null >= 0) {
    ::dup2(null, 0);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::close(null);
  }
  (void)!::write(report[1], "ok", 2);
  ::close(report[1]);
  ::_exit(serve(lines, delay_ns, static_cast<size_t>(limit_mib) << 20));
}

}  // namespace
}  // namespace cumulus::launch

int main(int argc, char** argv) {
  try {
    return cumulus::launch::run(argc, argv);
  } catch (const std::exception& e) {
    return cumulus::base::reportError(cumulus::launch::kProgram, e);
  }
}
