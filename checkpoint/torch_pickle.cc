#include "checkpoint/torch_pickle.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>

namespace cumulus::checkpoint {

std::vector<char> pickleForPython(const c10::IValue& value) {
  std::vector<char> pickled;
  torch::jit::Pickler pickler(
      [&pickled](const char* bytes, size_t size) {
        pickled.insert(pickled.end(), bytes, bytes + size);
      },
      /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
      /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();

  std::vector<char> file;
  file.reserve(pickled.size());
  {
    caffe2::serialize::PyTorchStreamWriter writer([&file](const void* bytes, size_t size) {
      const char* begin = static_cast<const char*>(bytes);
      file.insert(file.end(), begin, begin + size);
      return size;
    });
    // As torch::pickle_save lays it out: data/<i> per tensor, then data.pkl.
    torch::jit::writeArchiveAndTensors("data", pickled.data(), pickled.size(),
                                       pickler.tensorData(), writer);
    writer.writeEndOfFile();
  }
  return file;
}

}  // namespace cumulus::checkpoint
