# The libFuzzer build (-DCUMULUS_FUZZ=ON, CXX=clang++): only the fuzz targets of tests/fuzz and the
# LibTorch-free code they reach, every file of ours instrumented for coverage, ASan and UBSan.
# Debian's gRPC, protobuf, yaml-cpp and zlib stay as built (gcc, libstdc++): clang links against
# the same C++ ABI, and coverage is gathered on our code only. Included from the top CMakeLists
# after the common find_package calls; `make fuzz` configures it into build-fuzz/ and runs it.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "CUMULUS_FUZZ needs clang (libFuzzer): configure with CXX=clang++, "
                      "e.g. `make fuzz`")
endif()

set(CMAKE_CXX_FLAGS_FUZZ "-O1 -gline-tables-only -fno-omit-frame-pointer")
# UB is a finding, not a warning: stop at the first one so libFuzzer saves the input.
add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all)
# No checkout path in the binaries: its length moves the addresses that the targets compare, so
# one tree cloned at two paths explored differently. __FILE__ and debug info name files from the
# checkout root, UBSan's reports by their last two components, and ASan does not instrument globals
# (its metadata names each global's source file by its whole path; heap and stack are still
# checked, and `make sanitize` checks globals in the tests). Measured: two clones at paths of 9 and
# 38 characters then wrote the same fuzz-summary.txt.
add_compile_options("SHELL:-mllvm -asan-globals=0" -fsanitize-undefined-strip-path-components=-2
                    -ffile-prefix-map=${PROJECT_SOURCE_DIR}/= -ffile-prefix-map=${CMAKE_BINARY_DIR}/=build/)

# comm/reduce.cc's float16 conversions call compiler-rt helpers (__gnu_h2f_ieee) that GCC's
# libgcc, clang's default runtime on Debian, does not have: link clang's builtins too.
execute_process(COMMAND ${CMAKE_CXX_COMPILER} -rtlib=compiler-rt -print-libgcc-file-name
                OUTPUT_VARIABLE CUMULUS_CLANG_BUILTINS OUTPUT_STRIP_TRAILING_WHITESPACE)

include(cmake/cumulus.cmake)
add_subdirectory(base EXCLUDE_FROM_ALL)
add_subdirectory(proto)
# The libraries as the normal build defines them; EXCLUDE_FROM_ALL builds only what a fuzz target
# links (not cumulus-ps, cumulus-config or cumulus-run).
add_subdirectory(comm EXCLUDE_FROM_ALL)
add_subdirectory(configs EXCLUDE_FROM_ALL)
add_subdirectory(launch EXCLUDE_FROM_ALL)  # cumulus_live: the live endpoint's record reader
add_subdirectory(tests/fuzz)
