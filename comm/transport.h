#pragma once
// What carries the data plane to a peer (as NCCL picks SHM/P2P for ranks on one host and sockets
// between hosts).
//
//   kTcp   TCP over the bind host: works between any two hosts.
//   kUnix  AF_UNIX stream sockets in the abstract namespace: only between processes that share a
//          kernel and a network namespace. It skips the TCP/IP stack (no segmentation,
//          checksums, ACK clocking, loopback softirq), which on the development VM moved one
//          64 MiB stream at 7.9 GB/s against TCP's 5.5-5.9 GB/s. Every payload is still copied
//          twice (sender into the kernel, kernel into the receiver).
//   kShm   kUnix plus a shared-memory channel per pair (comm/shm/channel.h): payloads of
//          16 KiB up to a ring segment (512 KiB) are copied once into a slot of a memfd segment
//          both ranks map, and the receiver reduces straight from the slot. Headers, small
//          payloads and liveness stay on the AF_UNIX socket, so a SIGKILLed peer is still seen
//          as EOF and every wait keeps its deadline.
//   kAuto  kShm to every peer whose host id (localHostId()) equals ours, kTcp to the others; kUnix
//          where the peer offers no shared memory (it was forced to kUnix) or this host refuses a
//          segment (no memfd, no memory). Chosen because it measured faster than kUnix in every
//          64 MiB ring cell at p = 2 and 4, and used 27-46% less CPU per all-reduce
//          (bench/results/allreduce.md, 2026-11-22).
//
// The wire protocol above the stream (handshake, frames, timeouts, liveness) is the same for
// all: a SIGKILLed peer closes its socket either way, so dead-peer detection does not change.

#include <optional>
#include <string>
#include <utility>

namespace cumulus::comm {

enum class Transport { kAuto, kTcp, kUnix, kShm };
inline constexpr std::pair<Transport, const char*> kTransportNames[] = {{Transport::kAuto, "auto"},
                                                                        {Transport::kTcp, "tcp"},
                                                                        {Transport::kUnix, "unix"},
                                                                        {Transport::kShm, "shm"}};
constexpr const auto& enumNames(Transport) { return kTransportNames; }  // base/enum_names.h

const char* transportName(Transport transport);  // "auto", "tcp", "unix", "shm"
std::optional<Transport> parseTransport(const std::string& name);

// The environment's choice: CUMULUS_TRANSPORT (auto|tcp|unix|shm), kAuto when unset. Throws
// std::invalid_argument naming the variable and its value when it is set to anything else.
Transport transportFromEnvironment();

// Identifies "same kernel, same network namespace": boot_id + hostname + the net namespace
// inode. Two processes with equal ids can reach each other's abstract AF_UNIX sockets.
std::string localHostId();

}  // namespace cumulus::comm
