#!/usr/bin/env bash
# Installs the Debian packages Cumulus builds and runs with, and only those that are missing.
# Idempotent and silent when everything is present. Called by `make run` and `make test`.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libtorch-dev                       # LibTorch 1.13, CPU
  libopenblas0-openmp                # fast BLAS for LibTorch (see docs/training.md "Why OpenBLAS")
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  python3-protobuf                   # tests/trainer/read_tfevents.py: decodes the TensorBoard events
  libyaml-cpp-dev libgtest-dev zlib1g-dev
  libcli11-dev                       # CLI11: every binary's command line (base/command_line.h)
  libssl-dev                         # OpenSSL libcrypto: SHA-256, HMAC, random bytes
  libcurl4-openssl-dev               # HTTP for the cloud metadata services (preemption notices)
  nlohmann-json3-dev                 # JSON: AWS and Azure metadata answers
  libabsl-dev                        # Abseil: thread-safety annotations (base/annotated_mutex.h)
  dataset-fashion-mnist              # the real Fashion-MNIST in /usr/share/datasets/fashion-mnist
  python3-torch                      # the peer we compare against, and the TorchScript fixture
  python3-dev pybind11-dev           # the Python package (python/): the torch.distributed backend
  fortunes                           # English text for the GPT showcase (scripts/make_text_corpus.py)
  libcpp-httplib-dev                 # cumulus-run --metrics-port serves over cpp-httplib
  prometheus chromium-headless-shell # the live-metrics tests: a real scrape, a real browser
  iproute2 procps
  clang libclang-rt-14-dev           # libFuzzer, ASan and UBSan for `make fuzz`
  slurmctld slurmd slurm-client munge  # a real one-host Slurm cluster for the Slurm test
)

missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi

if ((${#missing[@]})); then
  echo "cumulus: installing missing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# LibTorch from Debian does its matrix work through whatever libblas.so.3 the alternatives system
# selects. Debian's reference BLAS is ~15x slower; OpenBLAS's OpenMP build shares LibTorch's
# OpenMP runtime, so the two do not oversubscribe the cores.
want=/usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3
alt=libblas.so.3-x86_64-linux-gnu
if [[ -e $want ]] && [[ "$(readlink -f /etc/alternatives/$alt 2>/dev/null)" != "$want" ]]; then
  echo "cumulus: selecting OpenBLAS (OpenMP) as the system BLAS"
  $SUDO update-alternatives --quiet --set $alt $want
fi
want=/usr/lib/x86_64-linux-gnu/openblas-openmp/liblapack.so.3
alt=liblapack.so.3-x86_64-linux-gnu
if [[ -e $want ]] && [[ "$(readlink -f /etc/alternatives/$alt 2>/dev/null)" != "$want" ]]; then
  $SUDO update-alternatives --quiet --set $alt $want
fi
