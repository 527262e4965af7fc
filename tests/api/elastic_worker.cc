// cumulus-elastic-worker: a small program on <cumulus/elastic.h> for elastic_test, which starts it
// as cumulus-run would (the in-place variables) and plays the launcher's part. A linear model on
// 64 fixed samples, SGD, a global batch of 8; it prints each membership and, at the end, the
// SHA-256 of its parameters.
//
//   cumulus-elastic-worker --config TEXT [--width N] [--steps N] [--wait-for N]
//
// --config is what the state is built from (ElasticState::config), --width the hidden layer's
// size: a joiner given another of either must be refused. --wait-for N: at each boundary, wait
// until the group has N members. --notice-at N: a preemption notice (PreemptionWatcher::notify)
// after step N. --bf16 1: gradients all-reduced as bfloat16 with error feedback; each step and
// each membership then prints the sum of this member's residual. At each boundary the members sum
// their losses (an all-reduce through Elastic::atBoundary); --die-in-boundary N: this worker
// SIGKILLs itself in that sum after step N, so that the others' fails there. Before the first step
// the members sum their parameters (start()'s `prepare`); --die-at-start 1 SIGKILLs this worker
// in that sum, --die-at-start 2 before start(), once it is connected. After the last step they sum
// them again (Elastic::atEnd); --die-at-end 1 SIGKILLs this worker there.
#include <signal.h>
#include <torch/torch.h>

#include <cstdio>
#include <string>
#include <vector>

#include "base/hash.h"
#include "cumulus/cumulus.h"

namespace {

struct Flags {
  std::string config = "default";
  int64_t width = 8;
  int64_t steps = 30;
  int64_t wait_for = 0;
  int64_t notice_at = 0;  // this worker gets a preemption notice after step N (0: never)
  bool bf16 = false;
  int64_t die_in_boundary = 0;  // SIGKILL in the boundary's sum after step N (0: never)
  int64_t die_at_start = 0;     // 1: in start()'s `prepare`; 2: before start()
  bool die_at_end = false;      // in atEnd's sum
};

// The sum of every member's parameters: a collective of the group's, before the first step and
// after the last.
double sumOfParameters(cumulus::Elastic& elastic, torch::nn::Sequential& net) {
  torch::NoGradGuard no_grad;
  torch::Tensor sum = torch::zeros({1}, torch::kFloat64);
  for (const auto& p : net->parameters()) sum += p.to(torch::kFloat64).sum();
  if (elastic.size() > 1) elastic.group().allreduce(sum);
  return sum.item<double>();
}

// The sum of this member's error-feedback residual (bf16 compression), exactly as a double.
double residualSum(cumulus::Elastic& elastic) {
  auto* sync = dynamic_cast<cumulus::DataParallel*>(&elastic.sync());
  if (sync == nullptr) return 0;
  const torch::Tensor r = sync->errorFeedback();
  return r.numel() == 0 ? 0.0 : r.to(torch::kFloat64).sum().item<double>();
}

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--config") {
      f.config = v;
    } else if (k == "--width") {
      f.width = std::stoll(v);
    } else if (k == "--steps") {
      f.steps = std::stoll(v);
    } else if (k == "--wait-for") {
      f.wait_for = std::stoll(v);
    } else if (k == "--notice-at") {
      f.notice_at = std::stoll(v);
    } else if (k == "--die-in-boundary") {
      f.die_in_boundary = std::stoll(v);
    } else if (k == "--die-at-start") {
      f.die_at_start = std::stoll(v);
    } else if (k == "--die-at-end") {
      f.die_at_end = v == "1";
    } else if (k == "--bf16") {
      f.bf16 = v == "1";
    } else {
      throw cumulus::UserError("unknown flag " + k);
    }
  }
  return f;
}

int run(const Flags& flags) {
  torch::manual_seed(7);
  torch::nn::Sequential net(torch::nn::Linear(4, flags.width), torch::nn::Tanh(),
                            torch::nn::Linear(flags.width, 1));
  torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.5));
  const torch::Tensor x = torch::linspace(-1, 1, 64 * 4).reshape({64, 4});
  const torch::Tensor y = x.sum(1, true).sin();
  cumulus::DistributedSampler sampler(64, 8, 3, /*shuffle=*/true, /*drop_last=*/true);

  cumulus::ElasticOptions options;
  options.wait_for_members = static_cast<int>(flags.wait_for);
  if (flags.bf16) options.data_parallel.compression = cumulus::Compression::kBf16;
  cumulus::Elastic elastic({[&] {
                              cumulus::Checkpoint c;
                              c.setSampler(sampler.state());
                              c.addModule(*net).addOptimizer(optimizer);
                              return c;
                            },
                            [&](const cumulus::Checkpoint& c) {
                              c.restoreModule(*net);
                              c.restoreOptimizer(optimizer);
                              sampler.restore(c.sampler());
                            },
                            flags.config},
                           options);
  std::printf("member %s, in place %d\n", elastic.memberId().c_str(),
              cumulus::Elastic::inPlaceRequested() ? 1 : 0);
  elastic.attach(net->parameters());
  elastic.onFailure([](const std::string& reason) { std::printf("failure: %s\n", reason.c_str()); });
  elastic.onMembershipChange([&](const cumulus::Membership& m) {
    std::string healed;
    for (int r : m.healed) healed += (healed.empty() ? "" : ",") + std::to_string(r);
    std::printf("membership: epoch %lld, rank %d of %d, step %lld, %s, state from %d to [%s]\n",
                static_cast<long long>(m.epoch), m.rank, m.size, static_cast<long long>(m.step),
                m.cause.c_str(), m.source, healed.c_str());
    if (flags.bf16) {
      std::printf("membership residual %.17g\n", residualSum(elastic));
    }
  });
  if (flags.die_at_start == 2) ::raise(SIGKILL);
  const bool started = elastic.start(0, [&] {
    if (flags.die_at_start == 1) ::raise(SIGKILL);
    std::printf("parameters at the start sum to %.17g\n", sumOfParameters(elastic, net));
  });
  if (!started) {
    std::printf("not admitted: the group finished\n");
    return 0;
  }
  double loss_sum = 0;  // this member's loss of the step, then the members' sum
  while (elastic.step() < flags.steps) {
    elastic.train([&] {
      const std::vector<int64_t> local = sampler.localIndices(elastic.rank(), elastic.size());
      const torch::Tensor idx = torch::tensor(local, torch::kInt64);
      optimizer.zero_grad();
      const torch::Tensor loss =
          (net->forward(x.index_select(0, idx)) - y.index_select(0, idx)).pow(2).sum() / 8.0;
      elastic.sync().backward(loss);
      loss_sum = loss.item<double>();
      optimizer.step();
      sampler.advance();
    });
    if (flags.bf16) {
      std::printf("step %lld residual %.17g\n", static_cast<long long>(elastic.step()),
                  residualSum(elastic));
    }
    const bool summed = elastic.atBoundary([&] {
      if (elastic.step() == flags.die_in_boundary) ::raise(SIGKILL);
      torch::Tensor sum = torch::full({1}, loss_sum, torch::kFloat64);
      elastic.group().allreduce(sum);
    });
    if (!summed) {
      std::printf("boundary of step %lld interrupted\n", static_cast<long long>(elastic.step()));
      continue;  // as every member: the next step
    }
    if (elastic.step() == flags.steps) break;
    if (elastic.step() == flags.notice_at) elastic.preemption().notify();
    const cumulus::ElasticAction action = elastic.boundary();
    if (action == cumulus::ElasticAction::kLeave) {
      std::printf("left at step %lld\n", static_cast<long long>(elastic.step()));
      return cumulus::kExitPreempted;
    }
    if (action == cumulus::ElasticAction::kStop) {
      elastic.waitForAll();
      std::printf("stopped at step %lld\n", static_cast<long long>(elastic.step()));
      return cumulus::kExitPreempted;
    }
  }
  elastic.atEnd([&] {
    if (flags.die_at_end) ::raise(SIGKILL);
    std::printf("parameters at the end sum to %.17g over %d members\n",
                sumOfParameters(elastic, net), elastic.size());
  });
  elastic.finish();
  std::string bytes;
  for (const auto& p : net->parameters()) {
    const torch::Tensor t = p.detach().contiguous();
    bytes.append(static_cast<const char*>(t.data_ptr()), t.nbytes());
  }
  std::printf("final parameters sha256 %s\n", cumulus::base::sha256Hex(bytes).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cumulus-elastic-worker: %s\n", e.what());
    return cumulus::exitCodeFor(e);
  }
}
