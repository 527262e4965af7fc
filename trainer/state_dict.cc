#include "trainer/state_dict.h"

#include <torch/serialize.h>
#include <torch/torch.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "checkpoint/torch_pickle.h"

namespace cumulus::trainer {

void saveStateDict(const checkpoint::NamedTensors& tensors, const std::string& path) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [name, tensor] : tensors) {
    dict.insert(name, tensor.detach().to(torch::kCPU).contiguous().clone());
  }
  const std::vector<char> bytes = checkpoint::pickleForPython(c10::IValue(dict));
  const std::string tmp = path + ".tmp";
  // On any failure the partial file goes, and the message says why (errno's text).
  const auto fail = [&tmp](const std::string& what) {
    const int error = errno;
    std::remove(tmp.c_str());
    throw std::runtime_error(what + ": " + std::strerror(error));
  };
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail("cannot open " + tmp + " for writing");
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) fail("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    fail("cannot rename " + tmp + " to " + path);
  }
}

checkpoint::NamedTensors loadStateDict(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open for reading");
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  checkpoint::NamedTensors out;
  try {
    const c10::IValue value = torch::pickle_load(bytes);
    if (!value.isGenericDict()) throw std::runtime_error("not a dict");
    for (const auto& entry : value.toGenericDict()) {
      out.emplace_back(entry.key().toStringRef(), entry.value().toTensor());
    }
  } catch (const c10::Error& e) {
    throw std::runtime_error(path + ": not a state_dict file: " + e.what_without_backtrace());
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(path + ": not a state_dict file: " + e.what());
  }
  return out;
}

}  // namespace cumulus::trainer
