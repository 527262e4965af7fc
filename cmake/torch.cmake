# LibTorch from the torch wheel of the project environment (.venv, made by scripts/python-env.sh
# from requirements.txt): the same torch for the C++ library, every program, the Python package
# and the tests' Python. CUMULUS_PYTHON names the interpreter; its torch decides.
#
# Sets CUMULUS_TORCH_DIR (the wheel's torch/ directory), Torch_VERSION ("2.15.0+cu132", as
# torch.__version__ says), TORCH_LIBRARIES (the target Cumulus::torch) and TORCH_PYTHON_LIBRARY.
#
# Why not find_package(Torch) from torch.utils.cmake_prefix_path: the PyPI wheel is built with
# CUDA, and its package then needs nvcc at configure time and links libtorch_cuda with the
# CUDA runtime and NCCL that CMake finds on the machine (here CUDA 13.0's, older than the wheel's
# 13.2: libtorch_cuda.so's ncclCommGrow and others are then undefined at link time). Cumulus's
# C++ side computes on the CPU: it links libtorch_cpu and libc10 only, which bring their own
# CUDA runtime from the wheel (their RPATH), so nothing of the machine's CUDA is used.
set(CUMULUS_PYTHON "${PROJECT_SOURCE_DIR}/.venv/bin/python" CACHE FILEPATH
    "The Python whose torch Cumulus builds against and whose interpreter runs the Python tests")
if(NOT EXISTS "${CUMULUS_PYTHON}")
  message(FATAL_ERROR "No Python at CUMULUS_PYTHON=${CUMULUS_PYTHON}: run `make setup` (it makes "
                      "the project environment .venv with torch), or pass "
                      "-DCUMULUS_PYTHON=/path/to/python of an environment with torch 2.x")
endif()
execute_process(
  COMMAND "${CUMULUS_PYTHON}" -c
          "import os, torch; print(os.path.dirname(torch.__file__)); print(torch.__version__); print(int(torch._C._GLIBCXX_USE_CXX11_ABI))"
  OUTPUT_VARIABLE _cumulus_torch_out ERROR_VARIABLE _cumulus_torch_err
  RESULT_VARIABLE _cumulus_torch_rc OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _cumulus_torch_rc EQUAL 0)
  message(FATAL_ERROR "${CUMULUS_PYTHON} cannot import torch (run `make setup`, or install "
                      "requirements.txt into that environment):\n${_cumulus_torch_err}")
endif()
string(REPLACE "\n" ";" _cumulus_torch_out "${_cumulus_torch_out}")
list(GET _cumulus_torch_out 0 CUMULUS_TORCH_DIR)
list(GET _cumulus_torch_out 1 Torch_VERSION)
list(GET _cumulus_torch_out 2 CUMULUS_TORCH_CXX11_ABI)
if(Torch_VERSION VERSION_LESS 2.1)
  message(FATAL_ERROR "torch ${Torch_VERSION} in ${CUMULUS_TORCH_DIR} is too old: Cumulus needs "
                      "torch 2.x (requirements.txt pins the tested one)")
endif()
include(${CMAKE_CURRENT_LIST_DIR}/CumulusTorchTarget.cmake)
set(TORCH_LIBRARIES Cumulus::torch)
# What `cmake --install` puts in the prefix (libcumulus.so, the programs, the Python extension)
# finds this LibTorch where it is, not another one the loader would find first (a system
# libtorch_cpu.so of another version: "undefined symbol" at start).
list(APPEND CMAKE_INSTALL_RPATH "${CUMULUS_TORCH_DIR}/lib")
set(TORCH_PYTHON_LIBRARY ${CUMULUS_TORCH_DIR}/lib/libtorch_python.so)
message(STATUS "LibTorch ${Torch_VERSION} from ${CUMULUS_TORCH_DIR}")
