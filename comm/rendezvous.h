#pragma once
// Rendezvous of the data plane: every rank listens on an ephemeral port of its bind host,
// publishes "host:port" under gen/<g>/addr/<rank> in the Store, waits for everyone's address,
// then connects.
//
// Same-host peers (comm/transport.h): unless the transport is kTcp, a rank also listens on a
// fresh abstract AF_UNIX name and publishes "<host id>\n<name>" under gen/<g>/local/<rank>
// (before its address, so whoever sees the address sees this too). The connecting rank (the
// higher one) uses AF_UNIX when both host ids match, TCP otherwise; under kAuto a refused AF_UNIX
// connect (another network namespace) falls back to TCP, under kUnix it is an error. The
// acceptor takes either; the handshake, and so the token and generation checks, is the same.
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

#include "comm/store.h"
#include "comm/tcp/pair.h"
#include "comm/transport.h"

namespace cumulus::comm {

struct RendezvousConfig {
  int rank = 0;
  int world = 1;
  uint64_t generation = 0;
  std::string token;
  std::string bindHost = "127.0.0.1";
  int socketBufferBytes = 0;  // 0: kernel autotuning
  Transport transport = Transport::kAuto;
  tcp::Deadline deadline;
};

std::string addressKey(uint64_t generation, int rank);  // "gen/<g>/addr/<rank>"
std::string localKey(uint64_t generation, int rank);    // "gen/<g>/local/<rank>"

// Returns pairs[peer] for every peer; pairs[rank] is null.
std::vector<std::unique_ptr<tcp::Pair>> connectMesh(Store& store, const RendezvousConfig& config);

}  // namespace cumulus::comm
