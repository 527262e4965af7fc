#pragma once
// PointToPoint: sends and receives between two ranks, apart from the collectives (as MPI_Isend and
// MPI_Irecv, Gloo's unbound buffers, c10d's send, recv and recvAnysource).
//
// Every rank runs the collectives in one order, and their frames follow one sequence
// (tcp/frame.h). A send is known to two ranks only, in an order of their own, so point-to-point
// messages travel on lanes of their own: a second connection per pair, opened and authenticated
// at the rendezvous (rendezvous.h, RendezvousConfig::point_to_point), driven by one progress
// thread that always reads every lane.
//
// Wire, per lane and direction, a stream of messages:
//   header (the 32-byte layout of tcp/frame.h): magic 'CMLP' | tag | generation | sequence | length
//   then `length` payload bytes.
// `sequence` numbers one direction's messages from 1. The receiver checks magic, generation and
// sequence, so a lane that delivers anything else fails (kBadFrame naming the peer) rather than
// handing over wrong data.
//
// Matching (MPI's rules):
// - Messages from one sender to one receiver arrive in the order they were sent; messages from
//   different senders are not ordered.
// - A message goes to the oldest pending receive that names its sender, or any source, and its
//   tag. A message that arrives first is buffered (an eager protocol: the receiver always reads, so
//   a sender never waits for its receive to be posted, and two ranks that both send before they
//   receive cannot deadlock); a receive posted later takes it at once.
// - A message must have exactly the receive's byte count. Otherwise that receive fails (kInvalid
//   naming the peer, the tag and both counts) and the message is dropped.
//
// Completion: a send's Work completes once its last byte is handed to the kernel (the peer may not
// have received it yet); a receive's once its bytes are in `data`, and its source() says who sent
// them. Failures, each naming the peer (or -1, any source) and the tag:
// - kTimeout: a receive that nothing matched by its deadline; it takes nothing afterwards. A send
//   not fully written by its deadline (the peer stopped reading): if it had begun, its lane is shut
//   down, since half a message cannot be taken back, and what else is pending on it fails too.
// - kPeerClosed: the lane closed (the peer died or shut down); what is pending on it fails, and so
//   does what is posted on it later, except receives of messages that had already arrived. A
//   receive from any source fails once no lane is left.
// - kBadFrame: the peer sent something other than the next message.
// - abort() (the group broke): everything pending and everything posted later fails with its error.
//
// Memory: `data` must stay valid, and a send's unchanged, until the Work completes. Buffered
// messages are held until received; nothing bounds them but what the peers send.
//
// Thread-safety: every method may be called from any thread. The progress thread alone touches the
// lanes.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <thread>
#include <vector>

#include "base/annotated_mutex.h"
#include "comm/net/socket.h"
#include "comm/work.h"

namespace cumulus::comm {

constexpr uint32_t kPointToPointMagic = 0x504c4d43;  // "CMLP" in memory order

// A receive's Work: source() is the rank whose message it took, once it completed successfully.
class ReceiveWork final : public Work {
 public:
  ReceiveWork(uint64_t seq, int source) : Work("recv", seq), source_(source) {}
  // The sender; before completion, the rank asked for (-1: any).
  int source() const { return source_.load(std::memory_order_acquire); }
  void setSource(int rank) { source_.store(rank, std::memory_order_release); }

 private:
  std::atomic<int> source_;
};

class PointToPoint {
 public:
  static constexpr int kAnySource = -1;

  // lanes[peer] for every peer (invalid at [rank]); starts the progress thread. `bytes_sent`
  // (may be null) is added each message's header and payload once it is written.
  PointToPoint(int rank, int world, uint64_t generation, std::vector<net::Socket> lanes,
               std::atomic<uint64_t>* bytes_sent);
  // Fails what is pending (kInvalid, "closed"), then stops the thread and closes the lanes.
  ~PointToPoint();
  PointToPoint(const PointToPoint&) = delete;
  PointToPoint& operator=(const PointToPoint&) = delete;

  // Sends `bytes` at `data` to `peer` under `tag`. Throws CommError(kInvalid) for a peer that is
  // not another rank of the group; every other failure is the Work's.
  std::shared_ptr<Work> send(int peer, uint32_t tag, const void* data, size_t bytes,
                             std::chrono::milliseconds timeout);
  // Receives exactly `bytes` into `data` from `source` (kAnySource: whoever sends first) under
  // `tag`. Throws as send() does.
  std::shared_ptr<ReceiveWork> recv(int source, uint32_t tag, void* data, size_t bytes,
                                    std::chrono::milliseconds timeout);

  // Fails everything pending and posted later with `error` (a CommError) and shuts every lane, so
  // the peers' receives from us fail at once. Idempotent: the first error stays.
  void abort(std::exception_ptr error);

  struct Send;
  struct Receive;
  class Engine;

 private:
  void checkPeer(const char* op, int peer, bool any) const;
  void loop();
  void wake();

  const int rank_;
  const int world_;
  int wake_fd_ = -1;  // eventfd: a post, an abort or the destructor woke the loop

  mutable base::Mutex mutex_;
  uint64_t next_seq_ ABSL_GUARDED_BY(mutex_) = 1;  // numbers the Works, for errors
  std::vector<std::shared_ptr<Send>> new_sends_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::shared_ptr<Receive>> new_receives_ ABSL_GUARDED_BY(mutex_);
  std::exception_ptr aborted_ ABSL_GUARDED_BY(mutex_);
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;

  std::unique_ptr<Engine> engine_;  // the lanes and what is pending: the progress thread's alone
  std::thread thread_;              // last: starts after the fields it reads
};

}  // namespace cumulus::comm
