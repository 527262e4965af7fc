#!/usr/bin/env bash
# Installs the Debian packages Cumulus builds and runs with, and only those that are missing.
# Idempotent and silent when everything is present. Called by `make run` and `make test`, before
# scripts/python-env.sh (torch and the Python packages come from PyPI, into .venv).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libyaml-cpp-dev libgtest-dev zlib1g-dev
  libcli11-dev                       # CLI11: every binary's command line (base/command_line.h)
  libssl-dev                         # OpenSSL libcrypto: SHA-256, HMAC, random bytes
  libcurl4-openssl-dev               # HTTP for the cloud metadata services (preemption notices)
  nlohmann-json3-dev                 # JSON: AWS and Azure metadata answers
  libabsl-dev                        # Abseil: thread-safety annotations (base/annotated_mutex.h)
  dataset-fashion-mnist              # the real Fashion-MNIST in /usr/share/datasets/fashion-mnist
  python3-venv python3-dev           # the project environment (.venv: torch from PyPI, python-env.sh)
  pybind11-dev                       # the Python package (python/): the torch.distributed backend
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
