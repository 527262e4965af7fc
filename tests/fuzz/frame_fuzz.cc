// The frame header parser of the data plane (comm/tcp/frame.h) as the transfer engine runs it
// (comm/tcp/transfer.h: every header checked against the frame that must come next). The peer's
// bytes arrive on a socket pair; the receiver expects 1 to 4 messages of fuzzed lengths (0 to 255
// bytes) of operation 3, generation 7. Layout: byte 0 = number of messages - 1 (mod 4), then one
// length byte per message, then the wire. A CommError is the expected answer to bad frames or a
// short stream; a transfer that succeeds must have delivered exactly the payload bytes the wire
// carried.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "comm/error.h"
#include "comm/tcp/frame.h"
#include "comm/tcp/pair.h"
#include "comm/tcp/transfer.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/wire.h"

namespace tcp = cumulus::comm::tcp;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t units = 1 + data[0] % 4;
  if (size < 1 + units) return 0;
  std::vector<std::vector<uint8_t>> buffers;
  for (size_t i = 0; i < units; ++i) buffers.emplace_back(data[1 + i], uint8_t{0xee});
  const uint8_t* wire = data + 1 + units;
  const size_t wireBytes = size - 1 - units;

  cumulus::fuzz::Wire socket(wire, wireBytes);
  tcp::Pair pair(std::move(socket.ours), 1);
  tcp::OpContext ctx;
  ctx.op = "fuzz";
  ctx.seq = 3;
  ctx.generation = 7;
  ctx.timeoutMs = 2000;
  ctx.deadline = tcp::Clock::now() + std::chrono::milliseconds(ctx.timeoutMs);
  tcp::Transfer transfer;
  transfer.recvFrom = &pair;
  transfer.recvUnits = units;
  transfer.recvSpan = [&](size_t i) { return tcp::Span{buffers[i].data(), buffers[i].size()}; };
  try {
    tcp::runTransfer(ctx, transfer);
  } catch (const cumulus::comm::CommError&) {
    return 0;
  }
  // Success: each non-empty message is a header and its payload, in order.
  size_t at = 0;
  for (size_t i = 0; i < units; ++i) {
    if (buffers[i].empty()) continue;
    cumulus::fuzz::check(at + tcp::kFrameHeaderBytes + buffers[i].size() <= wireBytes,
                         "message " + std::to_string(i) + " received beyond the wire's bytes");
    cumulus::fuzz::check(
        std::memcmp(buffers[i].data(), wire + at + tcp::kFrameHeaderBytes, buffers[i].size()) == 0,
        "message " + std::to_string(i) + " holds other bytes than were sent");
    at += tcp::kFrameHeaderBytes + buffers[i].size();
  }
  return 0;
}
