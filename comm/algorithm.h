#pragma once
// Which collective algorithm runs an all-reduce, and the seam through which the funnel
// (a gRPC parameter server, comm/funnel.h) plugs into the communicator without the TCP data
// plane knowing about gRPC.
//
//   kFunnel        every rank sends its buffer to a parameter server, which sends the sum back
//   kTree          binomial reduce to rank 0, then binomial broadcast (tree.h)
//   kRing          reduce-scatter + all-gather around one ring of all ranks (ring.h)
//   kHierarchical  ring reduce-scatter inside each host, ring all-reduce of each shard across
//                  hosts, ring all-gather inside each host (hierarchical.h); the flat ring when
//                  the hosts hold unequal numbers of ranks
//   kAuto          the cost model's pick for the size, world and topology (cost_model.h)

#include <chrono>
#include <cstdint>
#include <string>

#include "comm/types.h"
#include "cumulus/options.h"  // cumulus::Algorithm, its names and its parser

namespace cumulus::comm {

// An all-reduce performed by something outside the peer-to-peer data plane (the parameter
// server). `seq` is the communicator's operation sequence number; every rank passes the same.
// Blocks until the result is in `buffer` or throws CommError within `timeout`. Returns the bytes
// this rank handed to its transport for the call (what it sent, for the communicator's count of
// bytes sent: Communicator::bytesSent).
class RemoteReducer {
 public:
  virtual ~RemoteReducer() = default;
  virtual uint64_t allreduce(Buffer& buffer, ReduceOp op, uint64_t seq,
                             std::chrono::milliseconds timeout) = 0;
};

}  // namespace cumulus::comm
