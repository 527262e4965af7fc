#include "comm/exchange.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "comm/error.h"
#include "comm/net/frame.h"

namespace cumulus::comm {
namespace {

// A block cut into the collective's segments, the same way at both ends.
struct Pieces {
  Pieces(const Collective& c, const void* data, size_t total)
      : base(static_cast<uint8_t*>(const_cast<void*>(data))),
        total(total),
        size(std::max<size_t>(1, c.segment_bytes)),
        count((total + size - 1) / size) {}
  net::Span at(size_t i) const {
    const size_t begin = i * size;
    return {base + begin, std::min(size, total - begin)};
  }
  uint8_t* base;
  size_t total, size, count;
};

void sendBlock(const Collective& c, int to, const void* data, size_t bytes) {
  const Pieces pieces(c, data, bytes);
  net::Transfer t;
  t.send_to = c.peer(to);
  t.send_units = pieces.count;
  t.send_span = [&](size_t i) { return pieces.at(i); };
  net::runTransfer(c.op, t);
}

void recvBlock(const Collective& c, int from, void* data, size_t bytes) {
  const Pieces pieces(c, data, bytes);
  net::Transfer t;
  t.recv_from = c.peer(from);
  t.recv_units = pieces.count;
  t.recv_span = [&](size_t i) { return pieces.at(i); };
  net::runTransfer(c.op, t);
}

void copyBlock(void* to, const void* from, size_t bytes) {
  if (bytes > 0 && to != from) std::memmove(to, from, bytes);
}

std::vector<size_t> offsetsOf(const std::vector<size_t>& sizes) {
  std::vector<size_t> offsets(sizes.size(), 0);
  for (size_t i = 1; i < sizes.size(); ++i) offsets[i] = offsets[i - 1] + sizes[i - 1];
  return offsets;
}

}  // namespace

void directGather(const Collective& c, const void* input, size_t bytes, void* output, int root) {
  if (c.rank != root) return sendBlock(c, root, input, bytes);
  auto* out = static_cast<uint8_t*>(output);
  copyBlock(out + static_cast<size_t>(root) * bytes, input, bytes);
  for (int r = 0; r < c.world; ++r) {
    if (r != root) recvBlock(c, r, out + static_cast<size_t>(r) * bytes, bytes);
  }
}

void directScatter(const Collective& c, const void* input, void* output, size_t bytes, int root) {
  if (c.rank != root) return recvBlock(c, root, output, bytes);
  const auto* in = static_cast<const uint8_t*>(input);
  for (int r = 0; r < c.world; ++r) {
    if (r != root) sendBlock(c, r, in + static_cast<size_t>(r) * bytes, bytes);
  }
  copyBlock(output, in + static_cast<size_t>(root) * bytes, bytes);
}

void pairwiseAllToAll(const Collective& c, const void* input, const std::vector<size_t>& send_bytes,
                      void* output, const std::vector<size_t>& recv_bytes) {
  const std::vector<size_t> send_at = offsetsOf(send_bytes), recv_at = offsetsOf(recv_bytes);
  const auto* in = static_cast<const uint8_t*>(input);
  auto* out = static_cast<uint8_t*>(output);
  const auto self = static_cast<size_t>(c.rank);
  copyBlock(out + recv_at[self], in + send_at[self], send_bytes[self]);
  for (int k = 1; k < c.world; ++k) {
    const int to = c.mod(c.rank + k), from = c.mod(c.rank - k);
    const Pieces sending(c, in + send_at[static_cast<size_t>(to)],
                         send_bytes[static_cast<size_t>(to)]);
    const Pieces receiving(c, out + recv_at[static_cast<size_t>(from)],
                           recv_bytes[static_cast<size_t>(from)]);
    // Unit 0 of each block is its length; the block's segments follow.
    uint8_t length_out[8], length_in[8];
    net::storeLe64(length_out, sending.total);
    net::Transfer t;
    t.send_to = c.peer(to);
    t.send_units = 1 + sending.count;
    t.send_span = [&](size_t i) {
      return i == 0 ? net::Span{length_out, sizeof length_out} : sending.at(i - 1);
    };
    t.recv_from = c.peer(from);
    t.recv_units = 1 + receiving.count;
    t.recv_span = [&](size_t i) {
      return i == 0 ? net::Span{length_in, sizeof length_in} : receiving.at(i - 1);
    };
    t.on_received = [&](size_t i) {
      if (i != 0 || net::loadLe64(length_in) == receiving.total) return;
      throw CommError(
          ErrorKind::kInvalid, c.op.op, c.op.seq, from,
          "rank " + std::to_string(from) + " sends " + std::to_string(net::loadLe64(length_in)) +
              " bytes to rank " + std::to_string(c.rank) + ", which expects " +
              std::to_string(receiving.total) + " (do all ranks pass matching split sizes?)");
    };
    net::runTransfer(c.op, t);
  }
}

}  // namespace cumulus::comm
