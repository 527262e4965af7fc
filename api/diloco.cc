// DiLoCo (<cumulus/diloco.h>): the fragments, the outer gradient's encodings on the wire, and
// the outer optimizer.

#include "cumulus/diloco.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

#include "cumulus/process_group.h"

namespace cumulus {
namespace {

// int8: one float32 scale per this many values.
constexpr int64_t kInt8Chunk = 256;

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void checkOptions(const DiLoCoOptions& o, size_t tensors) {
  const auto fail = [](const std::string& what) { throw std::invalid_argument("DiLoCo: " + what); };
  if (o.inner_steps < 1) {
    fail("inner_steps is " + std::to_string(o.inner_steps) + "; it must be at least 1");
  }
  if (!(o.outer_lr > 0)) fail("outer_lr must be above 0");
  if (!(o.outer_momentum >= 0 && o.outer_momentum < 1)) fail("outer_momentum must be in [0, 1)");
  if (o.nesterov && o.outer_momentum == 0) fail("nesterov needs outer_momentum above 0");
  if (!(o.mix >= 0 && o.mix < 1)) fail("mix must be in [0, 1)");
  if (o.fragments < 1 || o.fragments > o.inner_steps) {
    fail("fragments is " + std::to_string(o.fragments) + "; it must be in [1, inner_steps = " +
         std::to_string(o.inner_steps) + "], so that each fragment has a step of its own");
  }
  if (static_cast<size_t>(o.fragments) > tensors) {
    fail("fragments is " + std::to_string(o.fragments) + " but the model has " +
         std::to_string(tensors) + " parameter tensor(s); a fragment holds whole tensors, so use " +
         "at most " + std::to_string(tensors));
  }
  if (o.timeout_seconds < 0) fail("timeout_seconds must be at least 0");
}

// Whole tensors in registration order, cut where the running element count passes k/F of the
// total, every fragment keeping at least one tensor.
std::vector<std::vector<size_t>> splitFragments(const std::vector<torch::Tensor>& params,
                                                int64_t count) {
  std::vector<double> ends;  // element count after each tensor
  double total = 0;
  for (const torch::Tensor& p : params) ends.push_back(total += static_cast<double>(p.numel()));
  const size_t n = params.size(), f = static_cast<size_t>(count);
  std::vector<std::vector<size_t>> out(f);
  size_t next = 0;
  for (size_t k = 0; k < f; ++k) {
    const double target = total * static_cast<double>(k + 1) / static_cast<double>(f);
    const size_t last_allowed = n - (f - k);  // leaves a tensor for each later fragment
    do {
      out[k].push_back(next++);
    } while (k + 1 == f ? next < n : next <= last_allowed && ends[next - 1] < target);
  }
  return out;
}

}  // namespace

struct DiLoCo::Impl {
  DiLoCoOptions options;
  std::vector<torch::Tensor> params;  // the replica's
  std::vector<torch::Tensor> global, momentum;
  std::vector<int64_t> offset;  // of each parameter in the residual
  torch::Tensor residual;       // [all elements]; defined with compression
  std::vector<std::vector<size_t>> fragments;
  std::vector<int64_t> fragment_offset;  // the step within a round each fragment is due at
  DiLoCoStats stats;

  // A fragment's all-reduce in flight (overlap), or the one just done.
  struct Round {
    int fragment = -1;
    int members = 1;
    torch::Tensor wire;           // what the collective writes: float32, bf16, or int32-packed int8
    torch::Tensor gathered;       // int8: every rank's wire, [members, n]
    torch::Tensor sent_residual;  // what this round's rounding took, for the next round
    std::unique_ptr<Work> work;
  };
  Round pending;

  int64_t fragmentElements(int f) const {
    int64_t n = 0;
    for (size_t i : fragments[f]) n += params[i].numel();
    return n;
  }

  // global - replica over the fragment's tensors, plus the residual: 1-D float32.
  torch::Tensor outerGradient(int f) const {
    std::vector<torch::Tensor> parts;
    for (size_t i : fragments[f]) parts.push_back((global[i] - params[i].detach()).reshape(-1));
    torch::Tensor g = torch::cat(parts);
    if (residual.defined()) {
      g.add_(residual.narrow(0, offset[fragments[f].front()], g.numel()));
    }
    return g;
  }

  // Encodes fragment f's outer gradient for the wire and starts (or runs) its collective.
  void start(int f, ProcessGroup* group, bool async);
  // Waits for the collective of `pending` and returns the average outer gradient, float32.
  torch::Tensor average();
  // The outer optimizer's step on fragment f with `g`, then the replica takes the result.
  void apply(int f, const torch::Tensor& g);
  void land(double* waited);
  // syncAll's agreement on how much of the last round every member landed (see there).
  void catchUp(ProcessGroup& group);
  // attachBuffers(): each buffer becomes its average over `group` (a collective).
  void averageBuffers(ProcessGroup* group);
  std::vector<torch::Tensor> buffers;
  // Fragments of the last round (syncAll) landed since the last beginStep.
  size_t final_landed = 0;
};

void DiLoCo::Impl::start(int f, ProcessGroup* group, bool async) {
  torch::NoGradGuard no_grad;
  Round round;
  round.fragment = f;
  round.members = group != nullptr ? group->size() : 1;
  CollectiveOptions call;
  call.timeout_seconds = options.timeout_seconds;
  const torch::Tensor g = outerGradient(f);
  switch (options.outer_compression) {
    case Compression::kNone:
      round.wire = g;
      break;
    case Compression::kBf16:
      round.wire = g.to(torch::kBFloat16);
      round.sent_residual = g - round.wire.to(torch::kFloat32);
      break;
    case Compression::kInt8: {
      const int64_t n = g.numel(), chunks = (n + kInt8Chunk - 1) / kInt8Chunk;
      torch::Tensor rows = torch::zeros({chunks * kInt8Chunk}, g.options());
      rows.narrow(0, 0, n).copy_(g);
      rows = rows.view({chunks, kInt8Chunk});
      torch::Tensor scale = std::get<0>(rows.abs().max(1)) / 127.0;
      scale = torch::where(scale > 0, scale, torch::ones_like(scale));
      const torch::Tensor q = (rows / scale.unsqueeze(1)).round().clamp(-127, 127);
      round.sent_residual =
          (rows - q * scale.unsqueeze(1)).reshape(-1).narrow(0, 0, n).contiguous();
      // One buffer: the scales' bytes, then the int8 values; sent as int32 words.
      torch::Tensor bytes = torch::empty({chunks * 4 + chunks * kInt8Chunk}, torch::kUInt8);
      bytes.narrow(0, 0, chunks * 4).copy_(scale.contiguous().view(torch::kUInt8));
      bytes.narrow(0, chunks * 4, chunks * kInt8Chunk)
          .copy_(q.to(torch::kInt8).reshape(-1).view(torch::kUInt8));
      round.wire = bytes.view(torch::kInt32);
      round.gathered = torch::empty({round.members, round.wire.numel()}, torch::kInt32);
      break;
    }
  }
  stats.payload_bytes += static_cast<uint64_t>(round.wire.numel() * round.wire.element_size());
  if (group != nullptr) {
    if (round.gathered.defined()) {
      round.work = group->allgatherAsync(round.wire, round.gathered, call);
    } else {
      round.work = group->allreduceAsync(round.wire, call);
    }
    if (!async) round.work->wait();
  } else if (round.gathered.defined()) {
    round.gathered[0].copy_(round.wire);
  }
  pending = std::move(round);
}

torch::Tensor DiLoCo::Impl::average() {
  torch::NoGradGuard no_grad;
  if (pending.work) pending.work->wait();
  const double members = pending.members;
  if (!pending.gathered.defined()) return pending.wire.to(torch::kFloat32) / members;
  const int64_t n = fragmentElements(pending.fragment);
  const int64_t chunks = (n + kInt8Chunk - 1) / kInt8Chunk;
  torch::Tensor sum = torch::zeros({chunks, kInt8Chunk});
  for (int64_t r = 0; r < pending.members; ++r) {  // in rank order: the same bits everywhere
    const torch::Tensor bytes = pending.gathered[r].view(torch::kUInt8);
    const torch::Tensor scale = bytes.narrow(0, 0, chunks * 4).view(torch::kFloat32);
    const torch::Tensor q = bytes.narrow(0, chunks * 4, chunks * kInt8Chunk)
                                .view(torch::kInt8)
                                .to(torch::kFloat32)
                                .view({chunks, kInt8Chunk});
    sum.add_(q * scale.unsqueeze(1));
  }
  return sum.reshape(-1).narrow(0, 0, n) / members;
}

void DiLoCo::Impl::apply(int f, const torch::Tensor& g) {
  torch::NoGradGuard no_grad;
  const double mu = options.outer_momentum, lr = options.outer_lr;
  int64_t at = 0;
  for (size_t i : fragments[f]) {
    const int64_t n = params[i].numel();
    const torch::Tensor gi = g.narrow(0, at, n).view(params[i].sizes());
    at += n;
    momentum[i].mul_(mu).add_(gi);
    const torch::Tensor d = options.nesterov ? gi + momentum[i] * mu : momentum[i];
    global[i].sub_(d * lr);
    if (options.mix == 0) {
      params[i].copy_(global[i]);
    } else {
      params[i].mul_(options.mix).add_(global[i] * (1 - options.mix));
    }
  }
  if (residual.defined() && pending.sent_residual.defined()) {
    residual.narrow(0, offset[fragments[f].front()], g.numel()).copy_(pending.sent_residual);
  }
}

void DiLoCo::Impl::land(double* waited) {
  const auto start = std::chrono::steady_clock::now();
  const int f = pending.fragment;
  torch::Tensor g;
  try {
    g = average();
  } catch (...) {
    *waited += secondsSince(start);
    pending = Round();
    throw;
  }
  *waited += secondsSince(start);
  apply(f, g);
  pending = Round();
  ++stats.rounds;
}

DiLoCo::DiLoCo(std::vector<torch::Tensor> params, DiLoCoOptions options)
    : impl_(std::make_unique<Impl>()) {
  checkOptions(options, params.size());
  if (options.outer_compression != Compression::kNone &&
      options.outer_compression != Compression::kBf16 &&
      options.outer_compression != Compression::kInt8) {
    throw std::invalid_argument("DiLoCo: outer_compression must be none, bf16 or int8");
  }
  Impl& m = *impl_;
  m.options = options;
  int64_t total = 0;
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].scalar_type() != torch::kFloat32) {
      throw std::invalid_argument("DiLoCo: parameter " + std::to_string(i) +
                                  " is not float32; the outer state is float32");
    }
    m.global.push_back(params[i].detach().clone());
    m.momentum.push_back(torch::zeros_like(params[i]));
    m.offset.push_back(total);
    total += params[i].numel();
  }
  m.params = std::move(params);
  if (options.outer_compression != Compression::kNone) m.residual = torch::zeros({total});
  m.fragments = splitFragments(m.params, options.fragments);
  for (int64_t f = 0; f < options.fragments; ++f) {
    m.fragment_offset.push_back((f + 1) * options.inner_steps / options.fragments %
                                options.inner_steps);
  }
}

DiLoCo::~DiLoCo() = default;

void DiLoCo::attachBuffers(std::vector<torch::Tensor> buffers) {
  impl_->buffers.clear();
  for (torch::Tensor& b : buffers) {
    // Masks and constants (bool, complex) are not statistics to average.
    if (!b.is_complex() && b.scalar_type() != torch::kBool) impl_->buffers.push_back(std::move(b));
  }
}

// Nothing changes unless the all-reduce completed, so a failure leaves the step to redo; and the
// average of buffers that already agree is themselves, so redoing it is harmless.
void DiLoCo::Impl::averageBuffers(ProcessGroup* group) {
  if (buffers.empty() || group == nullptr || group->size() < 2) return;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> flat;
  for (const torch::Tensor& b : buffers) flat.push_back(b.reshape(-1).to(torch::kFloat64));
  torch::Tensor sum = torch::cat(flat);
  group->allreduce(sum);
  sum.div_(static_cast<double>(group->size()));
  int64_t at = 0;
  for (torch::Tensor& b : buffers) {
    torch::Tensor average = sum.narrow(0, at, b.numel()).view(b.sizes());
    b.copy_(b.is_floating_point() ? average : average.round());
    at += b.numel();
  }
}

const std::vector<std::vector<size_t>>& DiLoCo::fragments() const { return impl_->fragments; }

int DiLoCo::dueAt(int64_t step) const {
  if (step <= 0) return -1;
  const int64_t within = step % impl_->options.inner_steps;
  for (size_t f = 0; f < impl_->fragment_offset.size(); ++f) {
    if (impl_->fragment_offset[f] == within) return static_cast<int>(f);
  }
  return -1;
}

void DiLoCo::beginStep(int64_t step, ProcessGroup* group) {
  if (impl_->pending.fragment >= 0) {
    throw std::logic_error(
        "DiLoCo::beginStep: the fragment started at the last step did not land; "
        "call endStep() (or cancel()) first");
  }
  impl_->final_landed = 0;  // training went on: a later syncAll is a new last round
  const int f = dueAt(step);
  if (f < 0) return;
  const auto started = std::chrono::steady_clock::now();
  try {
    // Once a round: the fragment due at its start (offset 0) is the last one.
    if (static_cast<size_t>(f) + 1 == impl_->fragments.size()) impl_->averageBuffers(group);
    impl_->start(f, group, impl_->options.overlap);
  } catch (...) {
    impl_->stats.wait_seconds += secondsSince(started);
    impl_->pending = Impl::Round();
    throw;
  }
  if (impl_->options.overlap) {
    impl_->stats.wait_seconds += secondsSince(started);  // the encoding
    return;
  }
  impl_->stats.wait_seconds += secondsSince(started);
  impl_->land(&impl_->stats.wait_seconds);
}

void DiLoCo::endStep() {
  if (impl_->pending.fragment < 0) return;
  impl_->land(&impl_->stats.wait_seconds);
}

void DiLoCo::syncAll(ProcessGroup* group) {
  endStep();
  if (group != nullptr && group->size() > 1) impl_->catchUp(*group);
  impl_->averageBuffers(group);
  for (size_t f = impl_->final_landed; f < impl_->fragments.size(); ++f) {
    const auto started = std::chrono::steady_clock::now();
    try {
      impl_->start(static_cast<int>(f), group, false);
    } catch (...) {
      impl_->stats.wait_seconds += secondsSince(started);
      impl_->pending = Impl::Round();
      throw;
    }
    impl_->stats.wait_seconds += secondsSince(started);
    impl_->land(&impl_->stats.wait_seconds);
    impl_->final_landed = f + 1;
  }
  resetReplica();  // exactly the global parameters, whatever `mix` kept
}

// A failure during the last round can find it landed on some members and not on others (one
// fragment's collective completed on some ranks only), and a second round would move the global
// parameters twice on those. So the members first say how many fragments of it they landed, and
// the first member that landed the most sends the global parameters and momentum of the fragments
// the others lack; they all hold the same then (members that landed a fragment hold its same
// bits), and the round goes on from there.
void DiLoCo::Impl::catchUp(ProcessGroup& group) {
  torch::NoGradGuard no_grad;
  const torch::Tensor mine = torch::full({1}, static_cast<int64_t>(final_landed), torch::kInt64);
  const torch::Tensor landed = group.allgather(mine).flatten();
  const int64_t fewest = landed.min().item<int64_t>();
  const int64_t most = landed.max().item<int64_t>();
  if (fewest == most) return;
  const int sender = static_cast<int>(landed.argmax().item<int64_t>());  // the first with `most`
  for (int64_t f = fewest; f < most; ++f) {
    for (size_t i : fragments[static_cast<size_t>(f)]) {
      group.broadcast(global[i], sender);
      if (momentum[i].defined()) group.broadcast(momentum[i], sender);
    }
  }
  final_landed = static_cast<size_t>(most);
}

void DiLoCo::cancel() { impl_->pending = Impl::Round(); }

void DiLoCo::setOuterLr(double lr) {
  if (!(lr > 0) || !std::isfinite(lr)) {
    throw std::invalid_argument("DiLoCo::setOuterLr: " + std::to_string(lr) +
                                "; the outer learning rate must be above 0 and finite");
  }
  impl_->options.outer_lr = lr;
}

double DiLoCo::outerLr() const { return impl_->options.outer_lr; }

DiLoCoState DiLoCo::state() const {
  DiLoCoState out;
  for (const torch::Tensor& t : impl_->global) out.global.push_back(t.clone());
  for (const torch::Tensor& t : impl_->momentum) out.momentum.push_back(t.clone());
  return out;
}

void DiLoCo::loadState(const DiLoCoState& state) {
  const auto check = [&](const std::vector<torch::Tensor>& tensors, const char* what) {
    if (tensors.size() != impl_->params.size()) {
      throw std::invalid_argument(std::string("DiLoCo::loadState: ") + what + " has " +
                                  std::to_string(tensors.size()) + " tensor(s), the model " +
                                  std::to_string(impl_->params.size()));
    }
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].sizes() != impl_->params[i].sizes()) {
        throw std::invalid_argument(std::string("DiLoCo::loadState: ") + what + " tensor " +
                                    std::to_string(i) + " does not have its parameter's shape");
      }
    }
  };
  check(state.global, "global");
  check(state.momentum, "momentum");
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < impl_->params.size(); ++i) {
    impl_->global[i].copy_(state.global[i]);
    impl_->momentum[i].copy_(state.momentum[i]);
  }
}

void DiLoCo::resetReplica() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < impl_->params.size(); ++i) impl_->params[i].copy_(impl_->global[i]);
}

torch::Tensor DiLoCo::residual() const {
  if (impl_->residual.defined()) return impl_->residual.clone();
  int64_t total = 0;
  for (const torch::Tensor& p : impl_->params) total += p.numel();
  return torch::zeros({total});
}

void DiLoCo::setResidual(const torch::Tensor& residual) {
  const torch::Tensor mine = this->residual();
  if (residual.dim() != 1 || residual.numel() != mine.numel()) {
    throw std::invalid_argument("DiLoCo::setResidual: " + std::to_string(residual.numel()) +
                                " element(s); this model's residual has " +
                                std::to_string(mine.numel()));
  }
  if (impl_->residual.defined()) impl_->residual.copy_(residual);
}

DiLoCoStats DiLoCo::stats() const { return impl_->stats; }

}  // namespace cumulus
