#!/usr/bin/env bash
# `make sanitize`: builds the LibTorch-free libraries (comm, metrics, configs, launch) and their tests
# twice, and runs the tests:
#   build-asan  AddressSanitizer + UndefinedBehaviorSanitizer: comm_test, metrics_test,
#               configs_test, launch_test, bench_test
#   build-tsan  ThreadSanitizer: comm_test, metrics_test, launch_test, bench_test (the code with
#               threads)
# A finding ends the process that made it with a nonzero status, so it fails its test, and the
# script then fails. Figures and the reasons for what is left out: docs/testing.md "Sanitizers".
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
jobs=${JOBS:-$(nproc)}

# Left out of both runs, by ctest pattern:
# - ElasticTest, CloudNoticeTest, Clouds/UnexpectedAnswerTest: they train with cumulus-train, which
#   links LibTorch and is not built here (NoticeTest covers the same notice code in-process).
# - Multihost, SlurmCluster: they need root and network namespaces or a one-host Slurm, and
#   build a whole cluster for each test; LauncherTest runs the same launcher on loopback.
exclude='\.(ElasticTest|CloudNoticeTest|Clouds/UnexpectedAnswerTest|Multihost|SlurmCluster)\.'

run_suite() {  # run_suite <build dir> <address|thread> <test binaries...>
  local dir=$1 kind=$2
  shift 2
  # GCC: cmake/sanitize.cmake says why. CXX is read on the first configure only. Unity build:
  # the files of each library, program and test binary compiled eight to a unit, so that the
  # headers' inline code is instrumented and optimized once per unit rather than once per file
  # (docs/testing.md "Build time").
  CXX=${CXX:-g++} cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCUMULUS_SANITIZE="$kind" -DCMAKE_UNITY_BUILD=ON \
    -DCUMULUS_PYTHON="$root/.venv/bin/python" >/dev/null
  cmake --build "$dir" -j "$jobs" --target "$@"
  local binaries
  binaries=$(IFS='|'; echo "$*")
  (cd "$dir" && ctest --output-on-failure -j "$jobs" -R "^($binaries)\." -E "$exclude")
}

# UBSan halts too (the build also says -fno-sanitize-recover), printing the stack it stopped at.
export ASAN_OPTIONS=detect_leaks=1:strict_init_order=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
run_suite build-asan address comm_test metrics_test configs_test launch_test bench_test

# gRPC, Abseil and protobuf come uninstrumented from Debian, and their locks (absl::Mutex on
# futexes) are invisible to TSan. Without ignore_noninstrumented_modules, the memcpy/memmove
# calls they make are still checked, against none of their synchronization: the first five
# StoreServerTest tests alone then gave 779 reports, each with gRPC, Abseil or protobuf on a
# stack. With it, every access made by our own (instrumented) code is still checked; what would
# be lost is a race between gRPC's own copying and our code. tsan.supp holds what is left, with
# reasons.
export TSAN_OPTIONS="halt_on_error=1:ignore_noninstrumented_modules=1:second_deadlock_stack=1"
TSAN_OPTIONS+=":suppressions=$root/scripts/sanitize/tsan.supp"
run_suite build-tsan thread comm_test metrics_test launch_test bench_test
