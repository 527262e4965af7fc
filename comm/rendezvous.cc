#include "comm/rendezvous.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <random>

#include "comm/error.h"
#include "comm/net/handshake.h"
#include "comm/shm/channel.h"

namespace cumulus::comm {
namespace {

std::string rankList(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

long msLeft(net::Deadline deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - net::Clock::now());
  return left.count() > 0 ? static_cast<long>(left.count()) : 0;
}

std::vector<std::string> collectAddresses(Store& store, const RendezvousConfig& cfg) {
  std::vector<std::string> keys;
  for (int r = 0; r < cfg.world; ++r) keys.push_back(addressKey(cfg.generation, r));
  try {
    store.wait(keys, std::chrono::milliseconds(msLeft(cfg.deadline)));
  } catch (const CommError& e) {
    if (e.kind() != ErrorKind::kTimeout) throw;
    std::vector<int> missing;
    for (int r = 0; r < cfg.world; ++r) {
      if (!store.tryGet(keys[static_cast<size_t>(r)])) missing.push_back(r);
    }
    if (missing.empty()) throw;  // they arrived just now; the Store's own error is accurate
    throw CommError(ErrorKind::kRendezvous, "rendezvous", 0, missing.front(),
                    "rank(s) " + rankList(missing) + " of " + std::to_string(cfg.world) +
                        " never published their address under gen/" +
                        std::to_string(cfg.generation) + "/addr/<rank> (did they start?)");
  }
  std::vector<std::string> addresses;
  for (const auto& key : keys) {
    auto value = store.tryGet(key);
    if (!value) {
      throw CommError(ErrorKind::kRendezvous, "rendezvous", 0, -1,
                      "key '" + key + "' vanished from the Store during rendezvous");
    }
    addresses.push_back(*value);
  }
  return addresses;
}

// A fresh abstract AF_UNIX name: the pid keeps ranks of one host apart, the random part keeps
// two communicators of one process (tests run every rank as a thread) and pid reuse apart.
std::string freshUnixName() {
  static std::atomic<uint64_t> counter{0};
  std::random_device device;
  const uint64_t salt = (uint64_t{device()} << 32) ^ device();
  char name[80];
  std::snprintf(name, sizeof name, "cumulus/%d/%llu/%016llx", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(counter.fetch_add(1)),
                static_cast<unsigned long long>(salt));
  return name;
}

bool wantsShm(Transport transport) {
  return transport == Transport::kShm || transport == Transport::kAuto;
}

// The AF_UNIX name the peer published under `key` if it is reachable that way from here (same
// host id), "" otherwise.
std::string sameHostName(Store& store, const std::string& key, const std::string& hostId) {
  auto value = store.tryGet(key);
  if (!value) return "";
  std::string text(value->begin(), value->end());
  auto newline = text.find('\n');
  if (newline == std::string::npos || text.substr(0, newline) != hostId) return "";
  return text.substr(newline + 1);
}

struct Connection {
  net::Socket socket;
  bool shm = false;  // reached the peer's shared-memory listener: offer a channel
};

[[noreturn]] void unreachable(Transport transport, int peer, const std::string& detail) {
  throw CommError(ErrorKind::kRendezvous, "rendezvous", 0, peer,
                  std::string("transport '") + transportName(transport) + "' cannot reach rank " +
                      std::to_string(peer) + ": " + detail +
                      " (use CUMULUS_TRANSPORT=auto or tcp across hosts)");
}

// The same-host AF_UNIX listener the peer published under `key`, connected.
Result<net::Socket> connectSameHost(Store& store, const std::string& key, const std::string& hostId,
                                    int peer, const char* what) {
  const std::string name = sameHostName(store, key, hostId);
  if (name.empty()) {
    return Status(ErrorKind::kRendezvous,
                  "rank " + std::to_string(peer) + " is on another host or does not offer " + what);
  }
  return net::Socket::connectUnix(name);
}

Connection connectTo(Store& store, const RendezvousConfig& cfg, int peer,
                     const std::string& address, const std::string& hostId) {
  if (wantsShm(cfg.transport)) {
    Result<net::Socket> socket =
        connectSameHost(store, shmKey(cfg.generation, peer), hostId, peer, "shared memory");
    if (socket.ok()) return {std::move(socket.value()), true};
    if (cfg.transport == Transport::kShm) {
      unreachable(cfg.transport, peer, socket.status().detail());
    }
  }
  if (cfg.transport != Transport::kTcp) {
    Result<net::Socket> socket =
        connectSameHost(store, localKey(cfg.generation, peer), hostId, peer, "AF_UNIX");
    if (socket.ok()) return {std::move(socket.value()), false};
    if (cfg.transport == Transport::kUnix) {
      unreachable(cfg.transport, peer, socket.status().detail());
    }
  }
  Result<net::Socket> socket = net::Socket::connect(address, cfg.deadline);
  if (!socket.ok()) {
    throw CommError(ErrorKind::kRendezvous, "rendezvous", 0, peer,
                    "cannot connect to rank " + std::to_string(peer) + " at " + address + ": " +
                        socket.status().detail());
  }
  return {std::move(socket.value()), false};
}

// A connection accepted by one of the listeners, and that listener's index.
struct Accepted {
  net::Socket socket;
  int listener = 0;
};

// Accepts the next connection on whichever listener has one (invalid listeners are skipped);
// kTimeout when none arrived before the deadline.
Result<Accepted> acceptAny(net::Socket* const* listeners, int count, net::Deadline deadline) {
  for (;;) {
    pollfd fds[3];
    int index[3];
    nfds_t n = 0;
    for (int i = 0; i < count; ++i) {
      if (!listeners[i]->valid()) continue;
      index[n] = i;
      fds[n++] = {listeners[i]->fd(), POLLIN, 0};
    }
    int rc = ::poll(fds, n, net::pollTimeoutMs(deadline));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) return Status(ErrorKind::kTimeout, "no connection arrived before the deadline");
    nfds_t ready = 0;
    while (ready + 1 < n && fds[ready].revents == 0) ++ready;
    const int which = index[ready];
    // Already readable: a near deadline only bounds a connection that was withdrawn meanwhile.
    Result<net::Socket> socket = listeners[which]->accept(net::Clock::now());
    if (socket.ok()) return Accepted{std::move(socket.value()), which};
    if (socket.status().kind() != ErrorKind::kTimeout || net::Clock::now() >= deadline) {
      return socket.status();
    }
  }
}

// This rank's listeners: TCP always, AF_UNIX unless the transport is TCP, and the shared-memory
// one when the transport may use it; each is published under its Store key.
struct Listeners {
  net::Socket tcp;
  net::Socket unix_socket;
  net::Socket shm;
};

Listeners listenAndPublish(Store& store, const RendezvousConfig& cfg, const std::string& hostId) {
  Listeners l;
  store.set(hostKey(cfg.generation, cfg.rank), hostIdOf(cfg));
  l.tcp = net::Socket::listen(cfg.bind_host);
  if (wantsShm(cfg.transport)) {
    const std::string name = freshUnixName() + "/shm";
    l.shm = net::Socket::listenUnix(name);
    store.set(shmKey(cfg.generation, cfg.rank), hostId + "\n" + name);
  }
  if (cfg.transport != Transport::kTcp) {
    const std::string name = freshUnixName();
    l.unix_socket = net::Socket::listenUnix(name);
    store.set(localKey(cfg.generation, cfg.rank), hostId + "\n" + name);
  }
  store.set(addressKey(cfg.generation, cfg.rank), l.tcp.localAddress());
  return l;
}

// The point-to-point lane to `peer`: its AF_UNIX listener when it is on this host and the
// transport allows, else its TCP address.
net::Socket connectLane(Store& store, const RendezvousConfig& cfg, int peer,
                        const std::string& address, const std::string& hostId) {
  if (cfg.transport != Transport::kTcp) {
    Result<net::Socket> socket =
        connectSameHost(store, localKey(cfg.generation, peer), hostId, peer, "AF_UNIX");
    if (socket.ok()) return std::move(socket.value());
  }
  return std::move(net::Socket::connect(address, cfg.deadline))
      .orRaise("rendezvous", 0, peer,
               "point-to-point lane to rank " + std::to_string(peer) + " at " + address);
}

// Connects to every lower rank, in rank order, and shakes hands; then its point-to-point lane.
void connectToLowerRanks(Store& store, const RendezvousConfig& cfg, const std::string& hostId,
                         const std::vector<std::string>& addresses, Mesh& mesh) {
  const net::HandshakeConfig self{cfg.generation, cfg.rank, cfg.world, cfg.token};
  net::HandshakeConfig lane = self;
  lane.lane = net::kPointToPointLane;
  for (int peer = 0; peer < cfg.rank; ++peer) {
    const std::string& address = addresses[static_cast<size_t>(peer)];
    Connection conn = connectTo(store, cfg, peer, address, hostId);
    net::connectorHandshake(conn.socket, self, peer, cfg.deadline);
    std::unique_ptr<shm::Channel> channel;
    if (conn.shm) {
      // kAuto settles for the plain socket when this host will not give us a segment.
      channel =
          shm::Channel::offer(conn.socket, peer, cfg.deadline, cfg.transport == Transport::kShm,
                              shm::kDefaultSlots, shm::slotBytesFor(cfg.segment_bytes));
    }
    conn.socket.tune(cfg.socket_buffer_bytes);
    mesh.pairs[static_cast<size_t>(peer)] =
        std::make_unique<net::Pair>(std::move(conn.socket), peer, std::move(channel));
    if (!cfg.point_to_point) continue;
    net::Socket socket = connectLane(store, cfg, peer, address, hostId);
    net::connectorHandshake(socket, lane, peer, cfg.deadline);
    socket.tune(cfg.socket_buffer_bytes);
    mesh.lanes[static_cast<size_t>(peer)] = std::move(socket);
  }
}

// Accepts every higher rank on any listener until each has connected or the deadline passes.
// A connection that fails the handshake or the segment offer, or claims a rank already
// connected, is dropped and named in the error should the deadline pass.
void acceptHigherRanks(Listeners& l, const RendezvousConfig& cfg, Mesh& mesh) {
  const net::HandshakeConfig self{cfg.generation, cfg.rank, cfg.world, cfg.token};
  auto& pairs = mesh.pairs;
  auto connected = [&](int r) {
    return pairs[static_cast<size_t>(r)] &&
           (!cfg.point_to_point || mesh.lanes[static_cast<size_t>(r)].valid());
  };
  int pending = (cfg.world - 1 - cfg.rank) * (cfg.point_to_point ? 2 : 1);
  std::string rejected;
  net::Socket* const listeners[3] = {&l.tcp, &l.unix_socket, &l.shm};
  while (pending > 0) {
    Result<Accepted> accepted = acceptAny(listeners, 3, cfg.deadline);
    if (!accepted.ok()) {
      std::vector<int> missing;
      bool lanesOnly = true;  // every missing rank connected its pair, not its lane
      for (int r = cfg.rank + 1; r < cfg.world; ++r) {
        if (connected(r)) continue;
        missing.push_back(r);
        if (!pairs[static_cast<size_t>(r)]) lanesOnly = false;
      }
      const std::string what =
          lanesOnly ? " never opened a point-to-point lane to rank " : " never connected to rank ";
      throw CommError(ErrorKind::kRendezvous, "rendezvous", 0, missing.front(),
                      "rank(s) " + rankList(missing) + what + std::to_string(cfg.rank) + " (" +
                          accepted.status().detail() + ")" +
                          (lanesOnly ? "; do all ranks agree on point_to_point?" : "") +
                          (rejected.empty() ? "" : "; last rejected connection: " + rejected));
    }
    net::Socket& socket = accepted.value().socket;
    const Result<net::HandshakePeer> handshake = net::acceptorHandshake(socket, self, cfg.deadline);
    if (!handshake.ok()) {
      rejected = handshake.status().detail();
      continue;  // not one of ours: drop it and keep waiting
    }
    const int peer = handshake.value().rank;
    if (handshake.value().lane == net::kPointToPointLane) {
      if (!cfg.point_to_point || mesh.lanes[static_cast<size_t>(peer)].valid() ||
          accepted.value().listener == 2) {
        rejected = "an unexpected point-to-point lane from rank " + std::to_string(peer) +
                   (cfg.point_to_point ? "" : " (does every rank agree on point_to_point?)");
        continue;
      }
      socket.tune(cfg.socket_buffer_bytes);
      mesh.lanes[static_cast<size_t>(peer)] = std::move(socket);
      --pending;
      continue;
    }
    if (pairs[static_cast<size_t>(peer)]) {
      rejected = "a second connection claiming rank " + std::to_string(peer);
      continue;
    }
    std::unique_ptr<shm::Channel> channel;
    if (accepted.value().listener == 2) {  // the shared-memory listener: the segment comes next
      // Bounded like the handshake: a connection that says nothing cannot hold us long.
      const net::Deadline offerDeadline =
          std::min(cfg.deadline, net::Clock::now() + std::chrono::seconds(10));
      Result<std::unique_ptr<shm::Channel>> offered = shm::Channel::accept(socket, offerDeadline);
      if (!offered.ok()) {
        rejected = "rank " + std::to_string(peer) + ": " + offered.status().detail();
        continue;
      }
      channel = std::move(offered.value());  // null: declined, the pair stays a plain socket
    }
    socket.tune(cfg.socket_buffer_bytes);
    pairs[static_cast<size_t>(peer)] =
        std::make_unique<net::Pair>(std::move(socket), peer, std::move(channel));
    --pending;
  }
}

}  // namespace

Mesh connectMesh(Store& store, const RendezvousConfig& cfg) {
  Mesh mesh;
  mesh.pairs.resize(static_cast<size_t>(cfg.world));
  if (cfg.point_to_point) mesh.lanes.resize(static_cast<size_t>(cfg.world));
  if (cfg.world == 1) return mesh;
  const std::string hostId = cfg.transport == Transport::kTcp ? "" : hostIdOf(cfg);
  Listeners listeners = listenAndPublish(store, cfg, hostId);
  const std::vector<std::string> addresses = collectAddresses(store, cfg);
  connectToLowerRanks(store, cfg, hostId, addresses, mesh);
  acceptHigherRanks(listeners, cfg, mesh);
  return mesh;
}

std::string hostIdOf(const RendezvousConfig& config) {
  return config.host_id.empty() ? localHostId() : config.host_id;
}

std::vector<std::string> collectHostIds(Store& store, const RendezvousConfig& cfg) {
  std::vector<std::string> ids;
  if (cfg.world == 1) return {hostIdOf(cfg)};
  for (int r = 0; r < cfg.world; ++r) {
    auto value = store.tryGet(hostKey(cfg.generation, r));
    if (!value) {
      throw CommError(ErrorKind::kRendezvous, "rendezvous", 0, r,
                      "rank " + std::to_string(r) + " published no host id under " +
                          hostKey(cfg.generation, r) +
                          " (is it running an older build of Cumulus? every rank needs the same)");
    }
    ids.emplace_back(value->begin(), value->end());
  }
  return ids;
}

}  // namespace cumulus::comm
