// The registry: name -> factory, with a "did you mean" for near misses.
#include "models/model.h"

#include "models/builtin.h"

#include <algorithm>
#include <stdexcept>

namespace cumulus::models {
namespace {

constexpr const char* kTorchScriptPrefix = "torchscript:";

size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string unknownModel(const std::string& name) {
  std::string known;
  for (const std::string& n : modelNames()) known += (known.empty() ? "" : ", ") + n;
  std::string message = "unknown model \"" + name + "\"; known models: " + known;
  // Compare "torchscript:<path>" by its prefix, so "torchscrpt:a.pt" still finds it.
  const std::string head = name.substr(0, name.find(':'));
  std::string best;
  size_t best_distance = 3;  // at most two edits away counts as close
  for (const std::string& candidate : modelNames()) {
    const std::string candidate_head = candidate.substr(0, candidate.find(':'));
    const size_t d = editDistance(head, candidate_head);
    if (d < best_distance && d < std::max<size_t>(candidate_head.size(), 2)) {
      best_distance = d;
      best = candidate;
    }
  }
  if (!best.empty()) message += " (did you mean \"" + best + "\"?)";
  return message;
}

}  // namespace

std::vector<torch::Tensor> Model::parameters() {
  std::vector<torch::Tensor> out;
  for (auto& named : namedParameters()) out.push_back(named.second);
  return out;
}

torch::Tensor Model::forwardLoss(const torch::Tensor&, const torch::Tensor&) {
  throw std::invalid_argument(
      "loss.name module: the built-in models (mlp, convnet) have no forward(inputs, targets) "
      "that returns a loss; use loss.name cross_entropy or mse, or a torchscript: model");
}

int64_t Model::parameterCount() {
  int64_t count = 0;
  for (auto& named : namedParameters()) count += named.second.numel();
  return count;
}

std::vector<std::string> modelNames() { return {"mlp", "convnet", "torchscript:<path>"}; }

std::unique_ptr<Model> makeModel(const ModelSpec& spec) {
  if (spec.name == "mlp") return makeMlp(spec);
  if (spec.name == "convnet") return makeConvnet(spec);
  if (spec.name.rfind(kTorchScriptPrefix, 0) == 0) {
    const std::string path = spec.name.substr(std::string(kTorchScriptPrefix).size());
    if (path.empty()) {
      throw std::invalid_argument(
          "model \"torchscript:\" needs a file path after the colon, "
          "e.g. torchscript:models/fixtures/tiny_scripted.pt");
    }
    return loadTorchScript(path);
  }
  throw std::invalid_argument(unknownModel(spec.name));
}

std::string groupThousands(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(i, ",");
  return (n < 0 ? "-" : "") + digits;
}

}  // namespace cumulus::models
