// The Store's request handlers (comm/store_service.h), called in-process with fuzzed requests.
// The input is a sequence of calls on one service (its map persists within the input): each is a
// byte choosing the method, a 2-byte little-endian length, and that many bytes parsed as the
// method's request message. Handlers answer with a grpc::Status; an exception, a sanitizer report
// or a status code the Store never uses is a finding, and so is an answer that contradicts the
// previous ones (a Get that misses a key just Set).
//
// A Get or Wait that would wait (wait_ms > 0 for a missing key) is preceded by a Set of those
// keys, so no call blocks; the wait_ms itself is passed on as fuzzed.

#include <grpcpp/grpcpp.h>

#include <google/protobuf/stubs/logging.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "comm/store_service.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

namespace proto = cumulus::proto;
using cumulus::fuzz::check;

void checkStatus(const grpc::Status& status, const char* method) {
  const grpc::StatusCode code = status.error_code();
  check(code == grpc::StatusCode::OK || code == grpc::StatusCode::INVALID_ARGUMENT ||
            code == grpc::StatusCode::OUT_OF_RANGE,
        std::string(method) + " answered " + std::to_string(code) + ": " + status.error_message());
}

template <typename Request>
bool parse(Request* request, const uint8_t* data, size_t size) {
  return request->ParseFromArray(data, static_cast<int>(size));
}

void call(proto::Store::Service& store, uint8_t method, const uint8_t* data, size_t size) {
  grpc::ServerContext context;
  switch (method % 7) {
    case 0: {
      proto::SetRequest request;
      proto::SetResponse response;
      if (!parse(&request, data, size)) return;
      const grpc::Status status = store.Set(&context, &request, &response);
      checkStatus(status, "Set");
      if (!status.ok()) return;
      proto::GetRequest get;
      proto::GetResponse got;
      get.set_key(request.key());
      grpc::ServerContext getContext;
      checkStatus(store.Get(&getContext, &get, &got), "Get");
      check(got.found() && got.value() == request.value(), "Get misses the value just Set");
      return;
    }
    case 1: {
      proto::GetRequest request;
      proto::GetResponse response;
      if (!parse(&request, data, size)) return;
      if (request.wait_ms() > 0) {
        proto::SetRequest set;
        proto::SetResponse ignored;
        set.set_key(request.key());
        grpc::ServerContext setContext;
        store.Set(&setContext, &set, &ignored);
      }
      checkStatus(store.Get(&context, &request, &response), "Get");
      return;
    }
    case 2: {
      proto::AddRequest request;
      proto::AddResponse response;
      if (!parse(&request, data, size)) return;
      checkStatus(store.Add(&context, &request, &response), "Add");
      return;
    }
    case 3: {
      proto::CompareSetRequest request;
      proto::CompareSetResponse response;
      if (!parse(&request, data, size)) return;
      checkStatus(store.CompareSet(&context, &request, &response), "CompareSet");
      return;
    }
    case 4: {
      proto::WaitRequest request;
      proto::WaitResponse response;
      if (!parse(&request, data, size)) return;
      if (request.wait_ms() > 0) {
        for (const std::string& key : request.keys()) {
          proto::SetRequest set;
          proto::SetResponse ignored;
          set.set_key(key);
          grpc::ServerContext setContext;
          store.Set(&setContext, &set, &ignored);
        }
      }
      const grpc::Status status = store.Wait(&context, &request, &response);
      checkStatus(status, "Wait");
      if (status.ok() && request.wait_ms() > 0) {
        check(response.missing().empty(), "Wait reports a key missing that was just Set");
      }
      return;
    }
    case 5: {
      proto::DeleteRequest request;
      proto::DeleteResponse response;
      if (!parse(&request, data, size)) return;
      checkStatus(store.Delete(&context, &request, &response), "Delete");
      return;
    }
    default: {
      proto::DeletePrefixRequest request;
      proto::DeletePrefixResponse response;
      if (!parse(&request, data, size)) return;
      checkStatus(store.DeletePrefix(&context, &request, &response), "DeletePrefix");
      return;
    }
  }
}

}  // namespace

// protobuf logs every string field that is not UTF-8; a fuzzer makes millions of them.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::unique_ptr<proto::Store::Service> store = cumulus::comm::makeStoreService("");
  while (size >= 3) {
    const uint8_t method = data[0];
    const size_t length = std::min<size_t>(data[1] | size_t{data[2]} << 8, size - 3);
    call(*store, method, data + 3, length);
    data += 3 + length;
    size -= 3 + length;
  }
  return 0;
}
