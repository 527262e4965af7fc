#include "comm/rendezvous.h"

#include <chrono>

#include "comm/error.h"
#include "comm/tcp/handshake.h"

namespace cumulus::comm {
namespace {

std::string rankList(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

long msLeft(tcp::Deadline deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - tcp::Clock::now());
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

}  // namespace

std::string addressKey(uint64_t generation, int rank) {
  return "gen/" + std::to_string(generation) + "/addr/" + std::to_string(rank);
}

std::vector<std::unique_ptr<tcp::Pair>> connectMesh(Store& store, const RendezvousConfig& cfg) {
  std::vector<std::unique_ptr<tcp::Pair>> pairs(static_cast<size_t>(cfg.world));
  if (cfg.world == 1) return pairs;
  tcp::Socket listener = tcp::Socket::listen(cfg.bindHost);
  store.set(addressKey(cfg.generation, cfg.rank), listener.localAddress());
  const std::vector<std::string> addresses = collectAddresses(store, cfg);
  const tcp::HandshakeConfig self{cfg.generation, cfg.rank, cfg.world, cfg.token};

  for (int peer = 0; peer < cfg.rank; ++peer) {
    const std::string& address = addresses[static_cast<size_t>(peer)];
    tcp::IoStatus status;
    tcp::Socket socket = tcp::Socket::connect(address, cfg.deadline, &status);
    if (!socket.valid()) {
      throw CommError(ErrorKind::kRendezvous, "rendezvous", 0, peer,
                      "cannot connect to rank " + std::to_string(peer) + " at " + address + ": " +
                          status.detail);
    }
    tcp::connectorHandshake(socket, self, peer, cfg.deadline);
    socket.tune(cfg.socketBufferBytes);
    pairs[static_cast<size_t>(peer)] = std::make_unique<tcp::Pair>(std::move(socket), peer);
  }

  int pending = cfg.world - 1 - cfg.rank;
  std::string rejected;
  while (pending > 0) {
    tcp::IoStatus status;
    tcp::Socket socket = listener.accept(cfg.deadline, &status);
    if (!socket.valid()) {
      std::vector<int> missing;
      for (int r = cfg.rank + 1; r < cfg.world; ++r) {
        if (!pairs[static_cast<size_t>(r)]) missing.push_back(r);
      }
      throw CommError(ErrorKind::kRendezvous, "rendezvous", 0, missing.front(),
                      "rank(s) " + rankList(missing) + " never connected to rank " +
                          std::to_string(cfg.rank) + " (" + status.detail + ")" +
                          (rejected.empty() ? "" : "; last rejected connection: " + rejected));
    }
    std::string why;
    const int peer = tcp::acceptorHandshake(socket, self, cfg.deadline, &why);
    if (peer < 0 || pairs[static_cast<size_t>(peer)]) {
      rejected = peer < 0 ? why : "a second connection claiming rank " + std::to_string(peer);
      continue;  // not one of ours: drop it and keep waiting
    }
    socket.tune(cfg.socketBufferBytes);
    pairs[static_cast<size_t>(peer)] = std::make_unique<tcp::Pair>(std::move(socket), peer);
    --pending;
  }
  return pairs;
}

}  // namespace cumulus::comm
