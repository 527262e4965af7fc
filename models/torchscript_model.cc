// Models loaded from a torch.jit.save file ("torchscript:<path>").
#include "base/regular_file.h"
#include "models/builtin.h"

#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>
#include <torch/version.h>

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cumulus/errors.h"

namespace cumulus::models {
namespace {

// torch's messages carry a C++ backtrace or, from the TorchScript interpreter, pages of source
// context ending in the Python-style error line ("RuntimeError: ..."). One line says it all.
std::string reasonOf(const std::string& text) {
  if (text.find("Traceback of TorchScript") != std::string::npos) {
    size_t end = text.find_last_not_of("\n ");
    if (end != std::string::npos) {
      const size_t begin = text.rfind('\n', end);
      return text.substr(begin == std::string::npos ? 0 : begin + 1, end - begin);
    }
  }
  const size_t end = text.find('\n');
  return end == std::string::npos ? text : text.substr(0, end);
}

class TorchScriptModel : public Model {
 public:
  TorchScriptModel(torch::jit::Module module, std::string path)
      : module_(std::move(module)), path_(std::move(path)) {}

  torch::Tensor forward(const torch::Tensor& x) override {
    const torch::IValue out = call({x});
    if (!out.isTensor()) {
      throw std::runtime_error("torchscript model " + path_ + ": forward returned " +
                               out.tagKind() + ", expected a tensor of logits");
    }
    return out.toTensor();
  }
  torch::Tensor forwardLoss(const torch::Tensor& x, const torch::Tensor& targets) override {
    const torch::IValue out = call({x, targets});
    if (!out.isTensor() || out.toTensor().dim() != 0) {
      std::string what = out.tagKind();
      if (out.isTensor()) {
        std::ostringstream shape;
        shape << out.toTensor().sizes();
        what = "a tensor of shape " + shape.str();
      }
      throw std::runtime_error("torchscript model " + path_ +
                               ": forward(inputs, targets) returned " + what +
                               ", not a scalar; with loss.name module it must return the mean loss "
                               "over the batch");
    }
    return out.toTensor();
  }
  std::vector<std::pair<std::string, torch::Tensor>> namedParameters() override {
    std::vector<std::pair<std::string, torch::Tensor>> out;
    for (const auto& p : module_.named_parameters(/*recurse=*/true)) {
      out.emplace_back(p.name, p.value);
    }
    return out;
  }
  std::vector<std::pair<std::string, torch::Tensor>> namedBuffers() override {
    std::vector<std::pair<std::string, torch::Tensor>> out;
    for (const auto& b : module_.named_buffers(/*recurse=*/true)) {
      out.emplace_back(b.name, b.value);
    }
    return out;
  }
  void train(bool on) override { module_.train(on); }
  std::string summary() override {
    return "torchscript:" + path_ + " (" + std::to_string(namedParameters().size()) +
           " tensors), " + groupThousands(parameterCount()) + " parameters";
  }

 private:
  // The model's own code failed: the same inputs fail the same way in any retry (exit code 2,
  // so that the launcher neither restarts nor replaces the worker).
  //
  // The graph executor runs the module without its optimizing passes, as an interpreter of the
  // graph's operations: autograd then records each operation as eager PyTorch does, instead of
  // the executor's symbolic differentiation of fused "differentiable graphs". On the GPT presets
  // a forward + backward takes 1.5-4% less time in float32 and 7-27% less under bf16 autocast,
  // and the bench preset's peak memory at batch 16 is about half (docs/training.md, "The
  // scripted graph, interpreted"). The setting is the calling thread's; the guard restores it.
  torch::IValue call(std::vector<torch::IValue> inputs) {
    const torch::jit::GraphOptimizerEnabledGuard interpreted(false);
    try {
      return module_.forward(std::move(inputs));
    } catch (const c10::Error& e) {
      throw PermanentError("torchscript model " + path_ +
                           ": forward failed: " + reasonOf(e.what_without_backtrace()));
    } catch (const std::exception& e) {  // the interpreter's JITException
      throw PermanentError("torchscript model " + path_ +
                           ": forward failed: " + reasonOf(e.what()));
    }
  }

  torch::jit::Module module_;
  std::string path_;
};

// Whether `path`, which LibTorch would not load, looks like a torch.save file: a whole zip archive
// (it ends with an end-of-central-directory record; a TorchScript file is one too, but it would
// have loaded, and a cut one has no such record) or a pickle (torch.save's legacy format).
bool looksLikeTorchSave(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  const std::streamoff size = in.tellg();
  if (!in || size < 4) return false;
  char head[4] = {};
  in.seekg(0);
  in.read(head, sizeof head);
  if (static_cast<unsigned char>(head[0]) == 0x80 && head[1] >= 2 && head[1] <= 5) return true;
  if (std::memcmp(head, "PK\x03\x04", 4) != 0) return false;
  // The record is in the last 22 bytes plus at most a 64 KiB comment.
  const std::streamoff tail = std::min<std::streamoff>(size, 22 + 65535);
  std::string bytes(static_cast<size_t>(tail), '\0');
  in.seekg(size - tail);
  in.read(bytes.data(), tail);
  return bytes.find(std::string("PK\x05\x06", 4)) != std::string::npos;
}

[[noreturn]] void failToLoad(const std::string& path, const std::string& reason) {
  // A file from a newer torch: its archive's format version is past what this one reads.
  static const std::regex kNewer(
      R"(version (\d+), but the maximum supported version for reading is (\d+))");
  std::smatch m;
  if (std::regex_search(reason, m, kNewer)) {
    throw std::invalid_argument(
        "cannot load TorchScript model " + path +
        ": it was saved by a newer torch than this one (its file format version is " + m[1].str() +
        "; torch " TORCH_VERSION ", which Cumulus is built with, reads up to version " +
        m[2].str() + "): save it with torch " TORCH_VERSION
        ", or build Cumulus against the torch that saved it");
  }
  // An operator this torch does not have: also what a newer torch's file looks like.
  if (reason.find("Unknown builtin op") != std::string::npos ||
      reason.find("Unknown type name") != std::string::npos) {
    throw std::invalid_argument("cannot load TorchScript model " + path + ": " + reason +
                                " (was it saved by a newer torch? Cumulus is built with torch " TORCH_VERSION
                                ")");
  }
  if (looksLikeTorchSave(path)) {
    throw std::invalid_argument(
        "cannot load TorchScript model " + path +
        ": it looks like a torch.save file (a state dict or a pickled model), not a TorchScript "
        "module; in Python, export the model with torch.jit.script(model) or "
        "torch.jit.trace(model, example_inputs), then call .save(path) on the result");
  }
  throw std::invalid_argument("cannot load TorchScript model " + path + ": " + reason);
}

}  // namespace

std::unique_ptr<Model> loadTorchScript(const std::string& path) {
  // torch's own text for these cases is garbled ("errno 2 on fopen: , file path: ..."): say it.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw std::invalid_argument("cannot load TorchScript model " + path + ": " +
                                std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) {
    throw std::invalid_argument("cannot load TorchScript model " + path +
                                ": it is a directory, not a torch.jit.save file");
  }
  if (!S_ISREG(st.st_mode)) {  // torch::jit::load of a FIFO would block in open(2) forever
    throw std::invalid_argument("cannot load TorchScript model " + path + ": it is " +
                                base::fileKindOf(st.st_mode) + ", not a regular file");
  }
  torch::jit::Module module;
  try {
    module = torch::jit::load(path, torch::kCPU);
  } catch (const c10::Error& e) {
    failToLoad(path, reasonOf(e.what_without_backtrace()));
  } catch (const std::exception& e) {
    failToLoad(path, reasonOf(e.what()));
  }
  if (!module.find_method("forward")) {
    throw std::invalid_argument("cannot load TorchScript model " + path +
                                ": it has no forward method");
  }
  return std::make_unique<TorchScriptModel>(std::move(module), path);
}

}  // namespace cumulus::models
