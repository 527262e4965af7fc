// The collectives of <cumulus/process_group.h> on tensors, each with an answer known in advance
// for P ranks (run under cumulus-run, or alone as a group of one):
//
//   allreduce sum of rank+1          every element P(P+1)/2
//   allreduce max of rank            P-1
//   allreduce avg of rank (float)    (P-1)/2
//   broadcast from rank P-1          [100(P-1), 100(P-1)+1, 100(P-1)+2]
//   allgather of [rank, rank^2]      row r is [r, r^2]
//   reduceScatter of [0..2P) + rank  rank r gets elements 2r and 2r+1 of the sum: P·i + P(P-1)/2
//   barrier
//
// Every rank prints what it got; cumulus-run puts "[rankN] " before each line.
#include <cumulus/cumulus.h>
#include <torch/torch.h>

#include <cstdio>
#include <sstream>
#include <string>

namespace {

// "[1, 2, 3]", or "[[0, 0], [1, 1]]" for a matrix: exact for integers, %g for floats.
std::string show(const torch::Tensor& t) {
  std::ostringstream out;
  out << "[";
  for (int64_t i = 0; i < t.size(0); ++i) {
    if (i > 0) out << ", ";
    if (t.dim() > 1) {
      out << show(t[i]);
    } else if (t.is_floating_point()) {
      out << t[i].item<double>();
    } else {
      out << t[i].item<int64_t>();
    }
  }
  out << "]";
  return out.str();
}

void run(cumulus::ProcessGroup& group) {
  const int64_t rank = group.rank();
  const int64_t p = group.size();
  const auto i64 = torch::kInt64;
  std::printf("rank %lld of %lld (cumulus %s)\n", static_cast<long long>(rank),
              static_cast<long long>(p), cumulus::version());

  torch::Tensor sum = torch::full({4}, rank + 1, i64);
  group.allreduce(sum);
  std::printf("allreduce sum of rank+1 = %s\n", show(sum).c_str());

  torch::Tensor max = torch::full({2}, rank, i64);
  cumulus::CollectiveOptions max_options;
  max_options.op = cumulus::ReduceOp::kMax;
  group.allreduce(max, max_options);
  std::printf("allreduce max of rank = %s\n", show(max).c_str());

  torch::Tensor avg = torch::full({2}, static_cast<double>(rank), torch::kFloat64);
  cumulus::CollectiveOptions avg_options;
  avg_options.op = cumulus::ReduceOp::kAvg;
  group.allreduce(avg, avg_options);
  std::printf("allreduce avg of rank = %s\n", show(avg).c_str());

  torch::Tensor from_last = torch::arange(3, i64) + 100 * rank;
  group.broadcast(from_last, static_cast<int>(p - 1));
  std::printf("broadcast from rank %lld = %s\n", static_cast<long long>(p - 1),
              show(from_last).c_str());

  const torch::Tensor gathered = group.allgather(torch::tensor({rank, rank * rank}, i64));
  std::printf("allgather of [rank, rank^2] = %s\n", show(gathered).c_str());

  const torch::Tensor block = group.reduceScatter(torch::arange(2 * p, i64) + rank);
  std::printf("reduceScatter of [0..2P) + rank = %s\n", show(block).c_str());

  group.barrier();
  std::printf("barrier passed\n");
}

}  // namespace

int main() {
  try {
    // Joins the group cumulus-run describes in the environment (a group of one without it).
    auto group = cumulus::ProcessGroup::fromEnvironment();
    run(*group);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collectives: %s\n", e.what());
    return cumulus::exitCodeFor(e);
  }
}
