#pragma once
// The names of the keys that the processes of one job share in the Store. They are a protocol
// between processes that may come from different builds (an agent of another version, a user's
// own worker program), so a format changes only together with every reader and writer;
// tests/comm/store_keys_test.cc pins each one. Every key is built here: nothing else concatenates
// one. Generations are decimal, node ids are --node-rank, ranks are global ranks.
//
// The data plane (comm/rendezvous.h), written by each worker and read by its peers:
//   gen/<g>/addr/<rank>    "host:port" of the rank's TCP listener
//   gen/<g>/local/<rank>   "<host id>\n<name>" of its AF_UNIX listener, when it offers one
//   gen/<g>/shm/<rank>     "<host id>\n<name>" of its shared-memory offer, when it makes one
//   gen/<g>/host/<rank>    its host id, whatever the transport (comm/topology.h)
//   gen/<g>/failed/<rank>  once an operation of the rank failed: "<blamed rank>\n<kind>\n
//                          <observer rank>\n<what the observer saw>" (comm/communicator.h)
// The agents' rendezvous rounds (launch/rendezvous_round.h):
//   rdzv/<g>/state           the round as JSON; changed by compare-and-set only
//   rdzv/<g>/settled         "1" once the host closed or ended the round (the others wait on it)
//   rdzv/<g>/coming/<node>   the nonce of a node of the last group that will join round g
//   rdzv/<g>/ack/<node>      the nonce of a node that read why round g ended
// The agents' group protocol (launch/group_store.h):
//   launch/<g>/failed          what failed first ("rank 3 failed (exit code 1)"); compare-and-set
//   launch/<g>/permanent       "1" once a failure that a restart would repeat was seen (a worker's
//                              exit code 2 or 127): every node gives up, with exit code 2
//   launch/<g>/regroup         why node 0 re-forms the group ("node(s) 2 waiting to join")
//   launch/<g>/stopped/<node>  "1" once that node's agent stopped its workers after a failure
//   launch/<g>/done/<node>     "1" once that node's workers all finished
//   launch/<g>/ps_endpoint     "host:port" of the funnel's parameter server, set by node 0
//   launch/<g>/slot/<node>.<local>  recovery in place: processes started in that worker slot so
//                                   far (Store add; the n of the next CUMULUS_MEMBER_ID)
//   launch/<g>/joined          recovery in place: node ids that joined the running group late,
//                              "2,5" in joining order; compare-and-set
// The workers' in-place membership (comm/quorum.h), <q> an epoch, <id> a CUMULUS_MEMBER_ID:
//   quorum/<g>/<q>/record        the closed epoch as JSON; compare-and-set from empty only
//   quorum/<g>/<q>/present/<id>  steps done of a member that asks to be in epoch q
//   quorum/<g>/<q>/id/<rank>     epoch 0 only: the id of the launch's rank
//   quorum/<g>/latest            the newest closed epoch (a hint for joiners; they scan on)
//   quorum/<g>/gone/<id>         why a member is gone (its agent saw it die, or it left)
//   quorum/<g>/tickets           join tickets taken so far (Store add)
//   quorum/<g>/ticket/<t>        the id of the joiner holding ticket t (1, 2, …)
//   quorum/<g>/finished          the last step, once the group trained it (waiting joiners leave)
// The live metrics (metrics/store_publisher.h → launch/job_metrics.h), for the whole job, only
// while node 0 serves them (cumulus-run --metrics-port):
//   metrics/records         records sent so far (Store add; the n of the next record)
//   metrics/record/<n>      the n-th metrics.jsonl record the writing rank wrote, as JSON; node 0
//                           removes it once read
//   metrics/rank/<rank>     that rank's latest status, as JSON (overwritten)
//   metrics/serving         "1" while node 0 serves them: the other nodes' agents tell their
//                           workers to send (CUMULUS_LIVE_METRICS)

#include <cstdint>
#include <string>

namespace cumulus::comm {

namespace store_keys_detail {
// "<space>/<g>/<leaf>"
template <typename Generation>
std::string key(const char* space, Generation g, const char* leaf) {
  return std::string(space) + "/" + std::to_string(g) + "/" + leaf;
}
// "<space>/<g>/<leaf>/<id>"
template <typename Generation, typename Id>
std::string key(const char* space, Generation g, const char* leaf, Id id) {
  return key(space, g, leaf) + "/" + std::to_string(id);
}
}  // namespace store_keys_detail

// The data plane.
inline std::string addressKey(uint64_t generation, int rank) {
  return store_keys_detail::key("gen", generation, "addr", rank);
}
inline std::string localKey(uint64_t generation, int rank) {
  return store_keys_detail::key("gen", generation, "local", rank);
}
inline std::string shmKey(uint64_t generation, int rank) {
  return store_keys_detail::key("gen", generation, "shm", rank);
}
inline std::string hostKey(uint64_t generation, int rank) {
  return store_keys_detail::key("gen", generation, "host", rank);
}
inline std::string failedKey(uint64_t generation, int rank) {
  return store_keys_detail::key("gen", generation, "failed", rank);
}

// The rendezvous rounds.
inline std::string roundStateKey(int64_t generation) {
  return store_keys_detail::key("rdzv", generation, "state");
}
inline std::string roundSettledKey(int64_t generation) {
  return store_keys_detail::key("rdzv", generation, "settled");
}
inline std::string roundComingKey(int64_t generation, int64_t node) {
  return store_keys_detail::key("rdzv", generation, "coming", node);
}
inline std::string roundAckKey(int64_t generation, int64_t node) {
  return store_keys_detail::key("rdzv", generation, "ack", node);
}

// The group protocol.
inline std::string groupFailedKey(int64_t generation) {
  return store_keys_detail::key("launch", generation, "failed");
}
inline std::string groupPermanentKey(int64_t generation) {
  return store_keys_detail::key("launch", generation, "permanent");
}
inline std::string groupRegroupKey(int64_t generation) {
  return store_keys_detail::key("launch", generation, "regroup");
}
inline std::string groupStoppedKey(int64_t generation, int64_t node) {
  return store_keys_detail::key("launch", generation, "stopped", node);
}
inline std::string groupDoneKey(int64_t generation, int64_t node) {
  return store_keys_detail::key("launch", generation, "done", node);
}
inline std::string groupParameterServerKey(int64_t generation) {
  return store_keys_detail::key("launch", generation, "ps_endpoint");
}
inline std::string groupMasterPortKey(int64_t generation) {
  return store_keys_detail::key("launch", generation, "master_port");
}

inline std::string groupSlotKey(int64_t generation, int64_t node, int64_t local_rank) {
  return store_keys_detail::key("launch", generation, "slot") + "/" + std::to_string(node) + "." +
         std::to_string(local_rank);
}
inline std::string groupJoinedKey(int64_t generation) {
  return store_keys_detail::key("launch", generation, "joined");
}

// The in-place membership.
inline std::string quorumRecordKey(int64_t generation, int64_t epoch) {
  return store_keys_detail::key("quorum", generation, "") + std::to_string(epoch) + "/record";
}
inline std::string quorumPresentKey(int64_t generation, int64_t epoch, const std::string& id) {
  return store_keys_detail::key("quorum", generation, "") + std::to_string(epoch) + "/present/" +
         id;
}
inline std::string quorumIdKey(int64_t generation, int64_t epoch, int rank) {
  return store_keys_detail::key("quorum", generation, "") + std::to_string(epoch) + "/id/" +
         std::to_string(rank);
}
inline std::string quorumLatestKey(int64_t generation) {
  return store_keys_detail::key("quorum", generation, "latest");
}
inline std::string quorumGoneKey(int64_t generation, const std::string& id) {
  return store_keys_detail::key("quorum", generation, "gone") + "/" + id;
}
inline std::string quorumTicketsKey(int64_t generation) {
  return store_keys_detail::key("quorum", generation, "tickets");
}
inline std::string quorumTicketKey(int64_t generation, int64_t ticket) {
  return store_keys_detail::key("quorum", generation, "ticket", ticket);
}
inline std::string quorumFinishedKey(int64_t generation) {
  return store_keys_detail::key("quorum", generation, "finished");
}

// The live metrics.
inline std::string metricsRecordCountKey() { return "metrics/records"; }
inline std::string metricsRecordKey(int64_t n) { return "metrics/record/" + std::to_string(n); }
inline std::string metricsRankKey(int64_t rank) { return "metrics/rank/" + std::to_string(rank); }
inline std::string metricsServingKey() { return "metrics/serving"; }

}  // namespace cumulus::comm
