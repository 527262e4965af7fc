#pragma once
// <cumulus/precision.h>: mixed precision on the CPU. Which precision to train in, and the guard
// that runs a forward pass in it.
//
// bf16 here means what torch.autocast("cpu", dtype=torch.bfloat16) and DeepSpeed's bf16 mode mean:
//   - the weights stay float32 (the "masters"), and so do their gradients, the optimizer's state
//     and the checkpoints;
//   - inside an Autocast, LibTorch's CPU autocast runs the operations that gain from it (matrix
//     products, convolutions, linear layers) in bfloat16 on bfloat16 copies of their inputs, and
//     keeps the rest (softmax, norms, losses, reductions) in float32. Each weight is cast once per
//     Autocast (the cast is cached until the outermost guard ends), and autograd takes the
//     gradient back through the cast to the float32 weight;
//   - the loss is computed in float32: call .to(torch::kFloat32) on the outputs after the guard.
// bfloat16 keeps float32's exponent range, so unlike float16 it needs no loss scaling.
//
// A CPU with native bfloat16 (AVX-512 BF16, or AMX) runs the products 2 to 4 times faster than in
// float32; without it LibTorch emulates bfloat16 and is slower than float32. Precision::kAuto
// decides from the CPU: choosePrecision below.
//
//   const cumulus::PrecisionChoice precision = cumulus::choosePrecision(cumulus::Precision::kAuto);
//   std::cout << "precision: " << precision.text() << "\n";
//   ...
//   torch::Tensor outputs;
//   {
//     cumulus::Autocast autocast(precision.precision);
//     outputs = model->forward(inputs);
//   }
//   torch::Tensor loss = torch::cross_entropy_loss(outputs.to(torch::kFloat32), targets);
//   loss.backward();  // outside the guard, as with torch.autocast
//
// Thread-safety: choosePrecision and CpuFeatures are pure apart from reading the CPU and the
// environment. Autocast changes the calling thread's autocast state (LibTorch keeps it per
// thread); create and destroy it on one thread, nested guards in reverse order.

#include <string>

#include "cumulus/options.h"  // Precision

namespace cumulus {

// What the CPU, and the math library as it is configured, can do in bfloat16.
struct CpuFeatures {
  bool avx512_bf16 = false;  // AVX-512 BF16 instructions, with the OS saving AVX-512 state
  bool amx_bf16 = false;     // AMX tiles with bfloat16
  // ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA) as the environment sets it; empty: unset. oneDNN,
  // which runs LibTorch's bfloat16 products, uses no instruction set above it.
  std::string onednn_max_isa;

  // This CPU (cpuid) and this process's environment.
  static CpuFeatures detect();
  // The instructions are there and ONEDNN_MAX_CPU_ISA does not rule them out.
  bool nativeBf16() const;
  // For a log line: "avx512_bf16, amx_bf16", "avx512_bf16", or "no avx512_bf16 or AMX"; with
  // ", but ONEDNN_MAX_CPU_ISA=AVX2 rules them out" when the environment does.
  std::string describe() const;
};

struct PrecisionChoice {
  Precision requested = Precision::kFp32;
  Precision precision = Precision::kFp32;  // what runs: kFp32 or kBf16, never kAuto
  // Why, for a log line: "auto: this CPU has native bf16 (avx512_bf16)".
  std::string reason;
  // Not empty when bf16 was asked for on a CPU without native bf16: it runs, slower than fp32.
  std::string warning;

  // "bf16 (auto: this CPU has native bf16 (avx512_bf16))": the precision and the reason.
  std::string text() const;
};

// kFp32 and kBf16 are taken as they are (kBf16 with a warning on a CPU without native bf16);
// kAuto becomes kBf16 exactly when cpu.nativeBf16().
PrecisionChoice choosePrecision(Precision requested,
                                const CpuFeatures& cpu = CpuFeatures::detect());

// While it lives, the calling thread's forward passes run under LibTorch's CPU autocast in
// bfloat16 (Precision::kBf16); with Precision::kFp32 it changes nothing. Precision::kAuto throws
// std::invalid_argument: choose first. The destructor restores the thread's previous autocast
// state, and the outermost guard drops the cached weight casts.
class Autocast {
 public:
  explicit Autocast(Precision precision);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  bool active_ = false;
  bool was_enabled_ = false;
  int was_dtype_ = 0;  // c10::ScalarType, kept as an int so that this header needs no LibTorch
};

}  // namespace cumulus
