// choosePrecision and CpuFeatures (<cumulus/precision.h>): auto decides from the CPU it is given,
// both ways; bf16 without native support runs with a warning; ONEDNN_MAX_CPU_ISA below bf16 counts
// as no native bf16.
#include "cumulus/precision.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace cumulus {
namespace {

CpuFeatures withBf16() {
  CpuFeatures cpu;
  cpu.avx512_bf16 = true;
  return cpu;
}

TEST(Precision, AutoIsBf16OnACpuWithNativeBf16) {
  const PrecisionChoice choice = choosePrecision(Precision::kAuto, withBf16());
  EXPECT_EQ(choice.requested, Precision::kAuto);
  EXPECT_EQ(choice.precision, Precision::kBf16);
  EXPECT_EQ(choice.reason, "auto: this CPU has native bf16 (avx512_bf16)");
  EXPECT_EQ(choice.warning, "");
  EXPECT_EQ(choice.text(), "bf16 (auto: this CPU has native bf16 (avx512_bf16))");
}

TEST(Precision, AutoIsFp32OnACpuWithout) {
  const PrecisionChoice choice = choosePrecision(Precision::kAuto, CpuFeatures{});
  EXPECT_EQ(choice.precision, Precision::kFp32);
  EXPECT_EQ(choice.text(), "fp32 (auto: this CPU has no native bf16 (no avx512_bf16 or AMX))");
  EXPECT_EQ(choice.warning, "");
}

TEST(Precision, AmxAloneCountsAsNative) {
  CpuFeatures cpu;
  cpu.amx_bf16 = true;
  EXPECT_TRUE(cpu.nativeBf16());
  EXPECT_EQ(choosePrecision(Precision::kAuto, cpu).precision, Precision::kBf16);
  EXPECT_EQ(cpu.describe(), "amx_bf16");
  cpu.avx512_bf16 = true;
  EXPECT_EQ(cpu.describe(), "avx512_bf16, amx_bf16");
}

TEST(Precision, AnIsaLimitBelowBf16MeansNoNativeBf16) {
  CpuFeatures cpu = withBf16();
  cpu.amx_bf16 = true;
  cpu.onednn_max_isa = "AVX2";
  EXPECT_FALSE(cpu.nativeBf16());
  EXPECT_EQ(cpu.describe(), "avx512_bf16, amx_bf16, but ONEDNN_MAX_CPU_ISA=AVX2 rules them out");
  EXPECT_EQ(choosePrecision(Precision::kAuto, cpu).precision, Precision::kFp32);
  // A limit at bf16 or above keeps it; one that leaves only AMX out keeps avx512_bf16.
  cpu.onednn_max_isa = "avx512_core_bf16";
  EXPECT_TRUE(cpu.nativeBf16());
  cpu.avx512_bf16 = false;
  EXPECT_FALSE(cpu.nativeBf16());
  cpu.onednn_max_isa = "ALL";
  EXPECT_TRUE(cpu.nativeBf16());
}

TEST(Precision, Bf16AsAskedRunsAndWarnsWithoutNativeSupport) {
  const PrecisionChoice native = choosePrecision(Precision::kBf16, withBf16());
  EXPECT_EQ(native.precision, Precision::kBf16);
  EXPECT_EQ(native.warning, "");
  const PrecisionChoice emulated = choosePrecision(Precision::kBf16, CpuFeatures{});
  EXPECT_EQ(emulated.precision, Precision::kBf16);
  EXPECT_EQ(emulated.warning,
            "precision bf16 on a CPU without native bf16 (no avx512_bf16 or AMX): LibTorch "
            "emulates it, which is slower than fp32; use precision auto to train in bf16 only "
            "where the CPU has it");
}

TEST(Precision, Fp32IsTakenAsItIs) {
  const PrecisionChoice choice = choosePrecision(Precision::kFp32, withBf16());
  EXPECT_EQ(choice.precision, Precision::kFp32);
  EXPECT_EQ(choice.text(), "fp32 (as asked)");
}

// detect() reads this CPU: it agrees with the kernel's flags in /proc/cpuinfo.
TEST(Precision, DetectAgreesWithProcCpuinfo) {
  std::ifstream in("/proc/cpuinfo");
  if (!in) GTEST_SKIP() << "no /proc/cpuinfo";
  std::string line, flags;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) == 0) {
      flags = line + " ";
      break;
    }
  }
  if (flags.empty()) GTEST_SKIP() << "/proc/cpuinfo has no flags line";
  const CpuFeatures cpu = CpuFeatures::detect();
  EXPECT_EQ(cpu.avx512_bf16, flags.find(" avx512_bf16 ") != std::string::npos) << flags;
  EXPECT_EQ(cpu.amx_bf16, flags.find(" amx_bf16 ") != std::string::npos) << flags;
}

TEST(Precision, DetectReadsTheIsaLimitFromTheEnvironment) {
  ::setenv("ONEDNN_MAX_CPU_ISA", "AVX2", 1);
  const CpuFeatures limited = CpuFeatures::detect();
  ::unsetenv("ONEDNN_MAX_CPU_ISA");
  EXPECT_EQ(limited.onednn_max_isa, "AVX2");
  EXPECT_FALSE(limited.nativeBf16());
  EXPECT_EQ(CpuFeatures::detect().onednn_max_isa, "");
}

}  // namespace
}  // namespace cumulus
