#include "trainer/optimizer_kernels.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <cmath>
#include <type_traits>
#include <vector>

namespace cumulus::trainer {
namespace {

// Elements per task: big enough that a task outweighs its scheduling, small enough that both
// threads get work on a 1 MiB bucket.
constexpr int64_t kGrain = 1 << 15;

template <typename F>
void withFlag(bool on, F&& body) {
  if (on) {
    body(std::true_type{});
  } else {
    body(std::false_type{});
  }
}

// One pass of SGD over [begin, end). The flags are compile-time, so the loop has no branch and
// the compiler vectorizes it. Each line is one rounding, in optimizer.h's order:
// d = g + wd w;  buf = buf mu + d (or d);  d = d + mu buf (Nesterov) or buf;  w = w + (-lr) d.
template <typename T, bool kDecay, bool kMomentum, bool kNesterov, bool kFirst>
void sgdRange(T* __restrict w, const T* __restrict g, T* __restrict buf, int64_t begin, int64_t end,
              T wd, T mu, T neg_lr) {
  for (int64_t i = begin; i < end; ++i) {
    T d = g[i];
    if constexpr (kDecay) d = d + wd * w[i];
    if constexpr (kMomentum) {
      T b;
      if constexpr (kFirst) {
        b = d;
      } else {
        b = buf[i] * mu;
        b = b + d;
      }
      buf[i] = b;
      if constexpr (kNesterov) {
        d = d + mu * b;
      } else {
        d = b;
      }
    }
    w[i] = w[i] + neg_lr * d;
  }
}

template <typename T>
void sgdTyped(const torch::Tensor& w_t, const torch::Tensor& g_t, const torch::Tensor& buf_t,
              const SgdArgs& a) {
  T* w = w_t.data_ptr<T>();
  const T* g = g_t.data_ptr<T>();
  T* buf = a.momentum != 0 ? buf_t.data_ptr<T>() : nullptr;
  const T wd = static_cast<T>(a.weight_decay);
  const T mu = static_cast<T>(a.momentum);
  const T neg_lr = static_cast<T>(-a.lr);
  withFlag(a.weight_decay != 0, [&](auto decay) {
    withFlag(a.momentum != 0, [&](auto momentum) {
      withFlag(a.nesterov, [&](auto nesterov) {
        withFlag(a.first, [&](auto first) {
          at::parallel_for(0, w_t.numel(), kGrain, [&](int64_t begin, int64_t end) {
            sgdRange<T, decltype(decay)::value, decltype(momentum)::value,
                     decltype(nesterov)::value, decltype(first)::value>(w, g, buf, begin, end, wd,
                                                                        mu, neg_lr);
          });
        });
      });
    });
  });
}

// One pass of AdamW over [begin, end), one rounding per line in optimizer.h's order:
// w = w f;  m = m b1 + c1 g;  v = v b2 + (c2 g) g;  den = sqrt(v) / s2 + eps;
// w = w + (step m) / den, with f = 1 - lr wd, c = 1 - b, s2 = sqrt(1 - b2^t),
// step = -lr / (1 - b1^t).
template <typename T>
inline __attribute__((always_inline)) void adamwRange(T* __restrict w, const T* __restrict g,
                                                      T* __restrict m, T* __restrict v,
                                                      int64_t begin, int64_t end, const T (&k)[8]) {
  const T f = k[0], b1 = k[1], c1 = k[2], b2 = k[3], c2 = k[4], s2 = k[5], eps = k[6], step = k[7];
  for (int64_t i = begin; i < end; ++i) {
    const T gi = g[i];
    T mi = m[i] * b1;
    mi = mi + c1 * gi;
    T vi = v[i] * b2;
    vi = vi + c2 * gi * gi;
    T den = std::sqrt(vi) / s2;
    den = den + eps;
    T wi = w[i] * f;
    wi = wi + step * mi / den;
    m[i] = mi;
    v[i] = vi;
    w[i] = wi;
  }
}

// The square root and the division make AdamW's pass bound by arithmetic rather than memory on
// 4-lane SSE2, so it is also compiled for AVX2 and picked at load time. Both give the same bits:
// each operation is correctly rounded IEEE arithmetic at any vector width, and nothing is fused.
__attribute__((target_clones("avx2", "default"))) void adamwRangeOf(float* w, const float* g,
                                                                    float* m, float* v,
                                                                    int64_t begin, int64_t end,
                                                                    const float (&k)[8]) {
  adamwRange<float>(w, g, m, v, begin, end, k);
}

__attribute__((target_clones("avx2", "default"))) void adamwRangeOf(double* w, const double* g,
                                                                    double* m, double* v,
                                                                    int64_t begin, int64_t end,
                                                                    const double (&k)[8]) {
  adamwRange<double>(w, g, m, v, begin, end, k);
}

template <typename T>
void adamwTyped(const torch::Tensor& w_t, const torch::Tensor& g_t, const torch::Tensor& m_t,
                const torch::Tensor& v_t, const AdamWArgs& a) {
  T* w = w_t.data_ptr<T>();
  const T* g = g_t.data_ptr<T>();
  T* m = m_t.data_ptr<T>();
  T* v = v_t.data_ptr<T>();
  const auto t = static_cast<double>(a.step);
  const T k[8] = {static_cast<T>(1.0 - a.lr * a.weight_decay),
                  static_cast<T>(a.beta1),
                  static_cast<T>(1.0 - a.beta1),
                  static_cast<T>(a.beta2),
                  static_cast<T>(1.0 - a.beta2),
                  static_cast<T>(std::sqrt(1.0 - std::pow(a.beta2, t))),
                  static_cast<T>(a.eps),
                  static_cast<T>(-a.lr / (1.0 - std::pow(a.beta1, t)))};
  at::parallel_for(0, w_t.numel(), kGrain,
                   [&](int64_t begin, int64_t end) { adamwRangeOf(w, g, m, v, begin, end, k); });
}

// Eight independent accumulators (so the loop is not one long chain of dependent additions),
// combined in a fixed order.
template <typename T>
double sumOfSquaresRange(const T* x, int64_t begin, int64_t end) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    for (int k = 0; k < 8; ++k) {
      const auto e = static_cast<double>(x[i + k]);
      acc[k] += e * e;
    }
  }
  for (int k = 0; i < end; ++i, ++k) {
    const auto e = static_cast<double>(x[i]);
    acc[k] += e * e;
  }
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

template <typename T>
double sumOfSquaresTyped(const T* x, int64_t n) {
  // Chunks of kGrain elements, whatever the thread count: the partial sums, and so their sum,
  // are the same on every machine.
  const int64_t chunks = (n + kGrain - 1) / kGrain;
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
  at::parallel_for(0, chunks, 1, [&](int64_t first, int64_t last) {
    for (int64_t c = first; c < last; ++c) {
      partial[static_cast<size_t>(c)] =
          sumOfSquaresRange(x, c * kGrain, std::min(n, (c + 1) * kGrain));
    }
  });
  double sum = 0;
  for (const double p : partial) sum += p;
  return sum;
}

}  // namespace

bool hasFusedKernel(torch::ScalarType type) {
  return type == torch::kFloat || type == torch::kDouble;
}

void sgdFused(const torch::Tensor& w, const torch::Tensor& g, const torch::Tensor& buf,
              const SgdArgs& args) {
  if (w.scalar_type() == torch::kDouble) {
    sgdTyped<double>(w, g, buf, args);
  } else {
    sgdTyped<float>(w, g, buf, args);
  }
}

void adamwFused(const torch::Tensor& w, const torch::Tensor& g, const torch::Tensor& m,
                const torch::Tensor& v, const AdamWArgs& args) {
  if (w.scalar_type() == torch::kDouble) {
    adamwTyped<double>(w, g, m, v, args);
  } else {
    adamwTyped<float>(w, g, m, v, args);
  }
}

void sgdOps(const torch::Tensor& w, const torch::Tensor& g, const torch::Tensor& buf,
            const SgdArgs& a) {
  torch::NoGradGuard no_grad;
  torch::Tensor d = g;
  if (a.weight_decay != 0) d = d.add(w, a.weight_decay);
  if (a.momentum != 0) {
    if (a.first) {
      buf.copy_(d);
    } else {
      buf.mul_(a.momentum).add_(d);
    }
    d = a.nesterov ? d.add(buf, a.momentum) : buf;
  }
  w.add_(d, -a.lr);
}

void adamwOps(const torch::Tensor& w, const torch::Tensor& g, const torch::Tensor& m,
              const torch::Tensor& v, const AdamWArgs& a) {
  torch::NoGradGuard no_grad;
  const auto t = static_cast<double>(a.step);
  const double bias1 = 1.0 - std::pow(a.beta1, t);
  const double bias2_sqrt = std::sqrt(1.0 - std::pow(a.beta2, t));
  w.mul_(1.0 - a.lr * a.weight_decay);
  m.mul_(a.beta1).add_(g, 1.0 - a.beta1);
  v.mul_(a.beta2).addcmul_(g, g, 1.0 - a.beta2);
  const torch::Tensor denom = (v.sqrt() / bias2_sqrt).add_(a.eps);
  w.addcdiv_(m, denom, -a.lr / bias1);
}

double sumOfSquares(const torch::Tensor& x) {
  switch (x.scalar_type()) {
    case torch::kFloat:
      return sumOfSquaresTyped(x.data_ptr<float>(), x.numel());
    case torch::kDouble:
      return sumOfSquaresTyped(x.data_ptr<double>(), x.numel());
    default: {
      const torch::Tensor wide = x.to(torch::kDouble);
      return sumOfSquaresTyped(wide.data_ptr<double>(), wide.numel());
    }
  }
}

}  // namespace cumulus::trainer
