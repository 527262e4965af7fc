# The README's two commands: `make run` and `make test`. Both install what is missing first.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CONFIG ?= configs/fashion_mnist.yaml
ARGS ?=
# Source files compiled eight to a unit (CMake's unity build): a fresh build in about half the
# time, since LibTorch's, gtest's and the headers' inline code is compiled once per unit instead
# of once per file. UNITY=OFF, on the first configure of a BUILD_DIR, gives one unit per file,
# which rebuilds less after a one-file change (docs/testing.md "Build time").
UNITY ?= ON

.PHONY: all setup configure build run test test-portable fuzz clean format gpt-data

all: build

# Debian's packages, then the project environment .venv (torch and the tests' Python packages
# from PyPI, pinned in requirements.txt).
setup:
	@scripts/install-deps.sh
	@scripts/python-env.sh

.venv/cumulus-requirements: requirements.txt
	@scripts/python-env.sh

# Configured again when requirements.txt changed what .venv holds (another torch).
$(BUILD_DIR)/build.ninja: .venv/cumulus-requirements
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=$(UNITY) \
	  -DCUMULUS_PYTHON=$(CURDIR)/.venv/bin/python >/dev/null

configure: setup $(BUILD_DIR)/build.ninja

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

# The GPT experiments' corpus and scripted models, made by scripts; each file only when missing
# or stale. `make run` makes them first when CONFIG names a file under data/gpt/.
gpt-data: setup
	@scripts/prepare_gpt.sh data/gpt

# Two workers on this machine through the launcher (flags win over the experiment's launch:).
NPROC ?= 2
run: build $(if $(shell grep -s 'data/gpt/' $(CONFIG)),gpt-data)
	$(BUILD_DIR)/bin/cumulus-run --nproc-per-node $(NPROC) -- $(BUILD_DIR)/bin/cumulus-train $(CONFIG) $(ARGS)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 600

# The whole suite beside busy loops (scripts/test-under-load.sh): HOGS (2) of them, RUNS (1) runs.
HOGS ?= 2
RUNS ?= 1
.PHONY: test-under-load
test-under-load: build
	@HOGS=$(HOGS) RUNS=$(RUNS) JOBS=$(JOBS) BUILD_DIR=$(BUILD_DIR) scripts/test-under-load.sh

# The LibTorch-using tests again on ATen's portable (non-vectorized) kernels, as on a CPU without
# AVX2: what another CPU computes differs in the last bits, and no test may depend on them.
test-portable: build
	cd $(BUILD_DIR) && ATEN_CPU_CAPABILITY=default ctest --output-on-failure -j $(JOBS) \
	  --timeout 600 -R '^(data|models|checkpoint|distributed|trainer|python)_test\.'

# libFuzzer targets (tests/fuzz/), built with clang into FUZZ_DIR, each over a scratch copy of its
# seed corpus; either target fails on any crash, sanitizer report, leak or hang (docs/testing.md
# "Fuzzing"). `make fuzz` (CI) replays the corpus and explores a fixed number of inputs per target
# from the fixed seed FUZZ_SEED: the same tree gives the same answer on any machine. `make
# fuzz-long`, or `make fuzz FUZZ_SECONDS=N`, explores N seconds (600) per target from random seeds,
# in FUZZ_FORK processes each. FUZZ_TARGETS="store npy" runs only those; FUZZ_JOBS of them run at
# a time (one per core).
FUZZ_DIR ?= build-fuzz
FUZZ_SEED ?= 1
FUZZ_FORK ?= 1
FUZZ_SECONDS ?=
FUZZ_TARGETS ?=
.PHONY: fuzz-build fuzz-long
fuzz-build: setup
	@CC=clang CXX=clang++ cmake -S . -B $(FUZZ_DIR) -G Ninja -DCUMULUS_FUZZ=ON -DCMAKE_UNITY_BUILD=ON \
	  >/dev/null
	@cmake --build $(FUZZ_DIR) -j $(JOBS)
fuzz: fuzz-build
	@FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_SEED=$(FUZZ_SEED) FUZZ_FORK=$(FUZZ_FORK) \
	  tests/fuzz/run.sh $(FUZZ_DIR) $(FUZZ_TARGETS)
fuzz-long: fuzz-build
	@FUZZ_SECONDS=$(or $(FUZZ_SECONDS),600) FUZZ_FORK=$(FUZZ_FORK) \
	  tests/fuzz/run.sh $(FUZZ_DIR) $(FUZZ_TARGETS)

# ASan+UBSan and TSan builds of the LibTorch-free code (build-asan, build-tsan), and their tests.
.PHONY: sanitize
sanitize: setup
	@JOBS=$(JOBS) scripts/sanitize.sh

# Clang's thread-safety analysis over the LibTorch-free code (comm, configs, launch and their
# tests) in TSA_DIR: a lock-discipline violation against the ABSL_GUARDED_BY and
# ABSL_EXCLUSIVE_LOCKS_REQUIRED annotations fails the build (cmake/thread_safety.cmake).
TSA_DIR ?= build-tsa
.PHONY: thread-safety
thread-safety: setup
	@CC=clang CXX=clang++ cmake -S . -B $(TSA_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DCUMULUS_THREAD_SAFETY=ON -DCMAKE_UNITY_BUILD=ON >/dev/null
	@cmake --build $(TSA_DIR) -j $(JOBS) --target comm_test configs_test launch_test

format:
	@git ls-files '*.cc' '*.h' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR)
