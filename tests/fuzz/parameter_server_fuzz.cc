// The parameter server's PushPull handler (comm/parameter_server_service.h), called in-process
// with fuzzed PushChunk messages over in-memory streams, one thread per rank as under a gRPC
// server. Byte 0 picks the world size (1 to 3); then each message is a rank byte (mod world), a
// 2-byte little-endian length and that many bytes parsed as a PushChunk, appended to that rank's
// stream. A fresh service serves each input.
//
// Expected answers are statuses; an exception, a sanitizer report or an unknown status code is a
// finding, and so is a world-1 step that succeeds with a sum, max or min other than the pushed
// buffer itself. Bounds the harness sets, so that no input waits or allocates much: with more
// than one rank, a header's timeout_ms becomes 1 to 3 ms (ranks whose steps differ wait for it);
// a count between 1 Mi elements and the server's limit is cut below 1 Mi (the server would
// allocate the whole step at once). Counts over the limit are passed on, as are world-1 timeouts.

#include <grpcpp/grpcpp.h>

#include <google/protobuf/stubs/logging.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/parameter_server.h"
#include "comm/parameter_server_service.h"
#include "comm/types.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

namespace proto = cumulus::proto;
using cumulus::fuzz::check;

class FakeStream : public cumulus::comm::PushPullStream {
 public:
  std::deque<proto::PushChunk> pushes;
  std::string pulled;

  void SendInitialMetadata() override {}
  bool Write(const proto::PullChunk& chunk, grpc::WriteOptions) override {
    pulled += chunk.data();
    return true;
  }
  bool NextMessageSize(uint32_t* size) override {
    *size = pushes.empty() ? 0 : static_cast<uint32_t>(pushes.front().ByteSizeLong());
    return !pushes.empty();
  }
  bool Read(proto::PushChunk* chunk) override {
    if (pushes.empty()) return false;
    *chunk = std::move(pushes.front());
    pushes.pop_front();
    return true;
  }
};

void bound(proto::PushChunk* chunk, int world) {
  if (!chunk->has_header()) return;
  proto::PushHeader* h = chunk->mutable_header();
  if (world > 1) h->set_timeout_ms(1 + h->timeout_ms() % 3);
  constexpr uint64_t kMaxElements = uint64_t{1} << 20;
  const uint64_t limit = cumulus::comm::ParameterServer::kMaxStepBytes;  // / element size below
  if (h->count() > kMaxElements && h->count() <= limit) h->set_count(h->count() % kMaxElements);
}

bool knownCode(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::ABORTED:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return true;
    default:
      return false;
  }
}

}  // namespace

// protobuf logs every string field that is not UTF-8; a fuzzer makes millions of them.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int world = 1 + data[0] % 3;
  std::vector<FakeStream> streams(world);
  std::vector<std::string> pushed(world);
  for (size_t at = 1; at + 3 <= size;) {
    const int rank = data[at] % world;
    const size_t length = std::min<size_t>(data[at + 1] | size_t{data[at + 2]} << 8, size - at - 3);
    proto::PushChunk chunk;
    if (chunk.ParseFromArray(data + at + 3, static_cast<int>(length))) {
      bound(&chunk, world);
      pushed[rank] += chunk.data();
      streams[rank].pushes.push_back(std::move(chunk));
    }
    at += 3 + length;
  }
  std::vector<proto::PushHeader> headers(world);
  for (int r = 0; r < world; ++r) {
    if (!streams[r].pushes.empty()) headers[r] = streams[r].pushes.front().header();
  }

  std::unique_ptr<cumulus::comm::PushPullHandler> service =
      cumulus::comm::makeParameterServerService("", world);
  std::vector<grpc::Status> statuses(world);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back([&, r] {
      grpc::ServerContext context;
      statuses[r] = service->pushPull(context, streams[r]);
    });
  }
  for (std::thread& t : ranks) t.join();

  for (int r = 0; r < world; ++r) {
    check(knownCode(statuses[r].error_code()), "rank " + std::to_string(r) + " got status " +
                                                   std::to_string(statuses[r].error_code()) + ": " +
                                                   statuses[r].error_message());
  }
  const auto op = static_cast<cumulus::comm::ReduceOp>(headers[0].op());
  if (world == 1 && statuses[0].ok() && op != cumulus::comm::ReduceOp::kAvg) {
    // Messages after the step's last piece stay unread; the pieces before are the buffer.
    check(streams[0].pulled == pushed[0].substr(0, streams[0].pulled.size()),
          "a world-1 step did not return the pushed buffer");
  }
  return 0;
}
