#pragma once
// Rendezvous of the data plane: every rank listens on an ephemeral port of its bind host,
// publishes "host:port" under gen/<g>/addr/<rank> in the Store, waits for everyone's address,
// then connects.
//
// Same-host peers (comm/transport.h): unless the transport is kTcp, a rank also listens on a
// fresh abstract AF_UNIX name and publishes "<host id>\n<name>" under gen/<g>/local/<rank>; under
// kShm and kAuto it listens on a second name for shared-memory pairs and publishes it the same
// way under gen/<g>/shm/<rank> (both before its address, so whoever sees the address sees these
// too). Every rank, whatever its transport, also publishes its host id (RendezvousConfig::host_id)
// under gen/<g>/host/<rank> before its address; collectHostIds() reads them all back for the
// topology (comm/topology.h). The connecting rank (the higher one) picks, when both host ids match,
// the shared-memory listener (kShm, kAuto), else the AF_UNIX one (kUnix, kAuto), else TCP (kAuto,
// kTcp); a forced kShm or kUnix that cannot be had is an error. On the shared-memory listener the
// handshake is followed by the segment offer (shm::Channel::offer/accept). The acceptor takes any
// of the three; the handshake, and so the token and generation checks, is the same.
//
// Point-to-point lanes: with RendezvousConfig::point_to_point, the connecting rank opens a second
// connection to every lower rank after the first, its handshake saying kPointToPointLane
// (tcp/handshake.h): AF_UNIX to a same-host peer unless the transport is kTcp, else TCP; never a
// shared-memory channel. comm/point_to_point.h carries sends and receives on them, apart from the
// collectives' strictly ordered frames. Every rank of a group must agree on the flag: a rank
// waiting for lanes its peers never open fails its rendezvous naming them.
//
// Topology: a full mesh (p(p−1)/2 connections). Ring neighbours, binomial-tree partners of any
// root and broadcast/reduce from any root together need most pairs anyway for the small p of this
// project (≤ 16 ranks per job: ≤ 15 sockets per rank); connecting them all up front keeps every
// collective free of connection set-up and its failure modes. Rank i connects to every j < i and
// accepts from every j > i; that order cannot deadlock (each rank only waits on lower ranks while
// connecting, and rank 0 only accepts).
//
// Blocking until connected or `deadline`. Throws CommError (op "rendezvous", seq 0):
//   kRendezvous  a rank never published its address / never connected (names the ranks)
//   kUnauthorized, kBadFrame  from the handshake (tcp/handshake.h)
//   kStore       the Store failed (its own CommError is passed on unchanged)

#include <memory>
#include <string>
#include <vector>

#include "comm/net/pair.h"
#include "comm/store.h"
#include "comm/store_keys.h"  // addressKey, localKey, shmKey: where each rank publishes itself
#include "comm/transport.h"

namespace cumulus::comm {

struct RendezvousConfig {
  int rank = 0;
  int world = 1;
  uint64_t generation = 0;
  std::string token;
  std::string bind_host = "127.0.0.1";
  int socket_buffer_bytes = 0;  // 0: kernel autotuning
  Transport transport = Transport::kAuto;
  size_t segment_bytes = 512 * 1024;  // the collectives' pipeline segment: sizes shm slots
  // Which host this rank is on; ranks with equal ids may use AF_UNIX and shared memory between
  // them and count as one host in the topology. Empty: localHostId(). Tests set distinct ids
  // to simulate several hosts on one machine (their ranks then meet over TCP).
  std::string host_id;
  bool point_to_point = false;  // also connect the point-to-point lanes (above)
  net::Deadline deadline;
};

struct Mesh {
  std::vector<std::unique_ptr<net::Pair>> pairs;  // pairs[peer]; null at [rank]
  // lanes[peer] when config.point_to_point (invalid at [rank]); empty otherwise.
  std::vector<net::Socket> lanes;
};

Mesh connectMesh(Store& store, const RendezvousConfig& config);

// After connectMesh: every rank's host id, ids[rank] (a world of one: just this rank's own, read
// from nowhere). Does not block: the ids were published before the addresses connectMesh waited
// for. Throws CommError(kRendezvous) naming a rank that published none (a build that predates
// the key).
std::vector<std::string> collectHostIds(Store& store, const RendezvousConfig& config);

// config.host_id, or localHostId() when it is empty.
std::string hostIdOf(const RendezvousConfig& config);

}  // namespace cumulus::comm
