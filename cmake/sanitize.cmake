# Sanitizer builds (`make sanitize`), each in its own build directory:
#   -DCUMULUS_SANITIZE=address  AddressSanitizer + UndefinedBehaviorSanitizer, halting on the
#                               first finding so that it fails the test (and CI);
#   -DCUMULUS_SANITIZE=thread   ThreadSanitizer.
# A sanitizing build leaves out the LibTorch libraries (data, models, trainer) and their tests:
# LibTorch is not instrumented, its translation units are the slow ones, and the code with our
# own threads and parsing (comm, configs, launch) has no LibTorch.
set(CUMULUS_SANITIZE "" CACHE STRING
    "Sanitizer build: address (ASan+UBSan), thread (TSan), or empty for none")
set_property(CACHE CUMULUS_SANITIZE PROPERTY STRINGS "" address thread)

if(CUMULUS_SANITIZE STREQUAL "")
  set(CUMULUS_WITH_TORCH ON)
  return()
endif()
set(CUMULUS_WITH_TORCH OFF)
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  # comm/reduce.cc dispatches with GCC's target_clones and the suppressions are written for
  # GCC's runtimes; see README "Tests".
  message(FATAL_ERROR "CUMULUS_SANITIZE needs GCC (found ${CMAKE_CXX_COMPILER_ID}); configure "
                      "with -DCMAKE_CXX_COMPILER=g++")
endif()
if(CUMULUS_SANITIZE STREQUAL "address")
  set(CUMULUS_SANITIZE_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=all)
elseif(CUMULUS_SANITIZE STREQUAL "thread")
  set(CUMULUS_SANITIZE_FLAGS -fsanitize=thread)
else()
  message(FATAL_ERROR "CUMULUS_SANITIZE=${CUMULUS_SANITIZE} is not a sanitizer this build "
                      "knows; use address (ASan+UBSan), thread (TSan), or leave it empty")
endif()
# Frame pointers and line tables (-g1) make the reports' stacks readable; -O1, as the sanitizers'
# own documentation advises. Against -O2 -g, GCC builds an instrumented unit in half the time
# (launch's first unity unit: 82 s to 39 s) and the stacks keep their file:line. The tests too:
# at -O0 they built faster still, but under TSan every access to a local is instrumented there,
# and comm_test's AllreduceMatrix ran 2.6 times as long (p4_tcp: 34 s against 13 s at -O1).
set(CMAKE_CXX_FLAGS_RELWITHDEBINFO "-O1 -g1 -DNDEBUG")
add_compile_options(${CUMULUS_SANITIZE_FLAGS} -fno-omit-frame-pointer)
add_link_options(${CUMULUS_SANITIZE_FLAGS})
