# The README's two commands: `make run` and `make test`. Both install what is missing first.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CONFIG ?= configs/fashion_mnist.yaml
ARGS ?=

.PHONY: all setup configure build run test clean format

all: build

setup:
	@scripts/install-deps.sh

$(BUILD_DIR)/build.ninja:
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null

configure: setup $(BUILD_DIR)/build.ninja

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

# Two workers on this machine through the launcher (flags win over the experiment's launch:).
NPROC ?= 2
run: build
	$(BUILD_DIR)/bin/cumulus-run --nproc-per-node $(NPROC) -- $(BUILD_DIR)/bin/cumulus-train $(CONFIG) $(ARGS)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 600

# ASan+UBSan and TSan builds of the LibTorch-free code (build-asan, build-tsan), and their tests.
.PHONY: sanitize
sanitize: setup
	@JOBS=$(JOBS) scripts/sanitize.sh

format:
	@git ls-files '*.cc' '*.h' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR)
