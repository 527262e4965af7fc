// CpuFeatures and choosePrecision (<cumulus/precision.h>): what the CPU can do in bfloat16, and
// the precision a run trains in. No LibTorch: the guard itself is in models/autocast.cc.

#include <cpuid.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cumulus/precision.h"

namespace cumulus {
namespace {

// The extended control register: which register states the OS saves on a context switch.
uint64_t xcr0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

std::string lowerCase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

// oneDNN's ISA names below AVX-512 BF16 (its documentation's cpu_isa list, older names too): any
// of them as ONEDNN_MAX_CPU_ISA leaves bfloat16 to emulation. A name not listed does not.
bool belowBf16(const std::string& isa) {
  const std::string name = lowerCase(isa);
  for (const char* lower : {"sse41", "avx", "avx2", "avx2_vnni", "avx2_vnni_2", "avx512_core",
                            "avx512_core_vnni", "avx512_mic", "avx512_mic_4ops"}) {
    if (name == lower) return true;
  }
  return false;
}

// Below AMX: everything above, and the AVX-512 levels that have bf16 but no tiles.
bool belowAmx(const std::string& isa) {
  const std::string name = lowerCase(isa);
  return belowBf16(isa) || name == "avx512_core_bf16" || name == "avx512_core_fp16";
}

}  // namespace

CpuFeatures CpuFeatures::detect() {
  CpuFeatures cpu;
  for (const char* name : {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value != '\0') {
      cpu.onednn_max_isa = value;
      break;
    }
  }
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return cpu;
  const bool osxsave = (ecx & (1u << 27)) != 0;
  if (!osxsave) return cpu;
  const uint64_t xcr = xcr0();
  // SSE, AVX, and the three AVX-512 states (opmask, upper halves of zmm0-15, zmm16-31).
  const bool avx512_state = (xcr & 0xe6) == 0xe6;
  // XTILECFG and XTILEDATA.
  const bool amx_state = (xcr & (3ull << 17)) == (3ull << 17);
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return cpu;
  const unsigned max_subleaf = eax;
  const bool avx512f = (ebx & (1u << 16)) != 0;
  cpu.amx_bf16 = amx_state && (edx & (1u << 22)) != 0;
  if (max_subleaf >= 1 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0) {
    cpu.avx512_bf16 = avx512_state && avx512f && (eax & (1u << 5)) != 0;
  }
  return cpu;
}

bool CpuFeatures::nativeBf16() const {
  if (belowBf16(onednn_max_isa)) return false;
  return avx512_bf16 || (amx_bf16 && !belowAmx(onednn_max_isa));
}

std::string CpuFeatures::describe() const {
  std::string text;
  if (avx512_bf16) text = "avx512_bf16";
  if (amx_bf16) text += std::string(text.empty() ? "" : ", ") + "amx_bf16";
  if (text.empty()) return "no avx512_bf16 or AMX";
  if (belowBf16(onednn_max_isa) || (!avx512_bf16 && belowAmx(onednn_max_isa))) {
    text += ", but ONEDNN_MAX_CPU_ISA=" + onednn_max_isa + " rules them out";
  }
  return text;
}

std::string PrecisionChoice::text() const {
  return std::string(precisionName(precision)) + " (" + reason + ")";
}

PrecisionChoice choosePrecision(Precision requested, const CpuFeatures& cpu) {
  PrecisionChoice choice;
  choice.requested = requested;
  const bool native = cpu.nativeBf16();
  switch (requested) {
    case Precision::kFp32:
      choice.precision = Precision::kFp32;
      choice.reason = "as asked";
      break;
    case Precision::kBf16:
      choice.precision = Precision::kBf16;
      choice.reason = "as asked; bf16 autocast, float32 weights and optimizer";
      if (!native) {
        choice.warning = "precision bf16 on a CPU without native bf16 (" + cpu.describe() +
                         "): LibTorch emulates it, which is slower than fp32; use precision auto "
                         "to train in bf16 only where the CPU has it";
      }
      break;
    case Precision::kAuto:
      choice.precision = native ? Precision::kBf16 : Precision::kFp32;
      choice.reason = native ? "auto: this CPU has native bf16 (" + cpu.describe() + ")"
                             : "auto: this CPU has no native bf16 (" + cpu.describe() + ")";
      break;
  }
  return choice;
}

}  // namespace cumulus
