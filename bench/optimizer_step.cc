// cumulus-optimizer-bench: how long one optimizer step takes, on the parameter shapes of a
// model, for the flat optimizer the trainer uses (trainer/optimizer.h) and for the per-tensor
// reference. bench/optimizer_step.py runs it beside torch.optim on the same shapes and prints
// the ratio; docs/benchmarks.md has the figures and the commands.
//
//   cumulus-optimizer-bench --model convnet|gpt --optimizer sgd|adamw --impl flat|per-tensor
//                           [--threads N] [--steps N] [--warmup N]
//
// Prints one JSON line: model, optimizer, impl, threads, params, tensors, buckets and the step
// times in milliseconds (median, min, max over --steps after --warmup untimed steps).
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/command_line.h"
#include "cumulus/options.h"  // the default bucket sizes
#include "models/model.h"
#include "trainer/optimizer.h"

namespace {

using cumulus::distributed::FlatParameters;

// The GPT of models/gpt/gpt.py's "bench" preset (configs/gpt_bench.yaml): byte vocabulary,
// 8 pre-norm blocks of width 512, 128 positions; 101 tensors, 25.5M parameters, in
// named_parameters() order.
std::vector<torch::Tensor> gptParameters(int64_t layers, int64_t dim, int64_t positions,
                                         int64_t vocab) {
  std::vector<std::vector<int64_t>> shapes = {{vocab, dim}, {positions, dim}};
  for (int64_t l = 0; l < layers; ++l) {
    const std::vector<std::vector<int64_t>> block = {
        {dim}, {dim}, {3 * dim, dim}, {3 * dim}, {dim, dim},     {dim},
        {dim}, {dim}, {4 * dim, dim}, {4 * dim}, {dim, 4 * dim}, {dim}};
    shapes.insert(shapes.end(), block.begin(), block.end());
  }
  shapes.push_back({dim});
  shapes.push_back({dim});
  shapes.push_back({vocab, dim});
  std::vector<torch::Tensor> params;
  for (const auto& shape : shapes) params.push_back((torch::randn(shape) * 0.02).requires_grad_());
  return params;
}

std::vector<torch::Tensor> modelParameters(const std::string& model) {
  torch::manual_seed(0);
  if (model == "gpt") return gptParameters(8, 512, 128, 256);
  cumulus::models::ModelSpec spec;
  spec.name = "convnet";
  spec.dropout = 0.4;
  return cumulus::models::makeModel(spec)->parameters();
}

// The experiments' hyper-parameters: SGD as in the training trace that first measured the step
// (Nesterov, momentum 0.9, weight decay 5e-4), AdamW as configs/fashion_mnist_convnet.yaml.
cumulus::configs::OptimizerConfig optimizerConfig(const std::string& name) {
  cumulus::configs::OptimizerConfig c;
  c.name = *cumulus::base::valueNamed<cumulus::configs::OptimizerName>(name);
  if (c.name == cumulus::configs::OptimizerName::kSgd) {
    c.lr = 0.01;
    c.momentum = 0.9;
    c.nesterov = true;
    c.weight_decay = 5e-4;
  } else {
    c.lr = 1e-3;
    c.weight_decay = 0.01;
  }
  return c;
}

int run(int argc, char** argv) {
  namespace base = cumulus::base;
  CLI::App app{"Times one optimizer step on a model's parameter shapes; prints one JSON line.",
               "cumulus-optimizer-bench"};
  base::setUpCommandLine(app);
  std::string model = "convnet";
  std::string optimizer = "sgd";
  std::string impl = "flat";
  long threads = 1;
  long steps = 50;
  long warmup = 5;
  app.add_option("--model", model, "convnet or gpt (the 25.5M-parameter bench preset)")
      ->check(CLI::IsMember({"convnet", "gpt"}));
  app.add_option("--optimizer", optimizer, "sgd (Nesterov, weight decay) or adamw")
      ->check(CLI::IsMember({"sgd", "adamw"}));
  app.add_option("--impl", impl, "flat (the trainer's) or per-tensor (the reference)")
      ->check(CLI::IsMember({"flat", "per-tensor"}));
  app.add_option("--threads", threads, "intra-op threads")->transform(base::integerIn(1, 256));
  app.add_option("--steps", steps, "timed steps")->transform(base::integerIn(1, 100000));
  app.add_option("--warmup", warmup, "untimed steps first")->transform(base::integerIn(0, 100000));
  if (!base::parseCommandLine(app, argc, argv)) return 0;

  torch::set_num_threads(static_cast<int>(threads));
  const std::vector<torch::Tensor> params = modelParameters(model);
  const auto config = optimizerConfig(optimizer);
  std::unique_ptr<cumulus::trainer::Optimizer> opt;
  size_t buckets = params.size();
  if (impl == "flat") {
    // The trainer's layout with the default comm.bucket_cap_mb and comm.first_bucket_mb.
    auto flat = std::make_shared<FlatParameters>(
        params, cumulus::distributed::layoutOf(
                    params, static_cast<size_t>(cumulus::kDefaultBucketCapMb * (1 << 20)),
                    static_cast<size_t>(cumulus::kDefaultFirstBucketMb * (1 << 20))));
    flat->zeroGrads();
    buckets = flat->buckets().size();
    opt = cumulus::trainer::makeFlatOptimizer(config, flat);
  } else {
    for (const auto& p : params) p.mutable_grad() = torch::zeros_like(p);
    opt = cumulus::trainer::makePerTensorOptimizer(config, params);
  }
  int64_t numel = 0;
  {
    torch::NoGradGuard no_grad;
    for (const auto& p : params) {
      p.grad().normal_(0, 1e-3);
      numel += p.numel();
    }
  }
  std::vector<double> ms;
  for (long s = 0; s < warmup + steps; ++s) {
    const auto start = std::chrono::steady_clock::now();
    opt->step(config.lr);
    const auto end = std::chrono::steady_clock::now();
    if (s >= warmup) ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
  }
  std::sort(ms.begin(), ms.end());
  nlohmann::ordered_json out{{"model", model},       {"optimizer", optimizer},
                             {"impl", impl},         {"threads", threads},
                             {"params", numel},      {"tensors", params.size()},
                             {"buckets", buckets},   {"median_ms", ms[ms.size() / 2]},
                             {"min_ms", ms.front()}, {"max_ms", ms.back()}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    return cumulus::base::reportError("cumulus-optimizer-bench", e);
  }
}
