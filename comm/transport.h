#pragma once
// Which byte stream carries the data plane to a peer (as NCCL picks SHM/P2P for ranks on one
// host and sockets between hosts).
//
//   kTcp   TCP over the bind host: works between any two hosts.
//   kUnix  AF_UNIX stream sockets in the abstract namespace: only between processes that share a
//          kernel and a network namespace. It skips the TCP/IP stack (no segmentation,
//          checksums, ACK clocking, loopback softirq), which on the development VM moved one
//          64 MiB stream at 7.9 GB/s against TCP's 5.5-5.9 GB/s.
//   kAuto  kUnix to every peer whose host id (localHostId()) equals ours, kTcp to the others.
//
// The wire protocol above the stream (handshake, frames, timeouts, liveness) is the same for
// both: a SIGKILLed peer closes its socket either way, so dead-peer detection does not change.

#include <optional>
#include <string>

namespace cumulus::comm {

enum class Transport { kAuto, kTcp, kUnix };

const char* transportName(Transport transport);  // "auto", "tcp", "unix"
std::optional<Transport> parseTransport(const std::string& name);

// The environment's choice: CUMULUS_TRANSPORT (auto|tcp|unix), kAuto when unset. Throws
// std::invalid_argument naming the variable and its value when it is set to anything else.
Transport transportFromEnvironment();

// Identifies "same kernel, same network namespace": boot_id + hostname + the net namespace
// inode. Two processes with equal ids can reach each other's abstract AF_UNIX sockets.
std::string localHostId();

}  // namespace cumulus::comm
