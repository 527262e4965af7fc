# Clang's thread-safety analysis (`make thread-safety`): -DCUMULUS_THREAD_SAFETY=ON with
# CXX=clang++ adds -Wthread-safety -Werror=thread-safety to our own targets (cumulus_warnings), so
# that a member read or written without the mutex its ABSL_GUARDED_BY names, or a ...Locked()
# helper called without it, fails the build. The annotated types are base/annotated_mutex.h.
# Like the sanitizer builds (sanitize.cmake), it leaves out the LibTorch libraries and their
# tests: the analysis needs no run, and LibTorch's translation units are the slow ones.
option(CUMULUS_THREAD_SAFETY "Clang -Wthread-safety build of the LibTorch-free code" OFF)
if(NOT CUMULUS_THREAD_SAFETY)
  return()
endif()
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "CUMULUS_THREAD_SAFETY needs Clang (found ${CMAKE_CXX_COMPILER_ID}): GCC "
                      "has no thread-safety analysis; configure with CXX=clang++")
endif()
if(NOT CUMULUS_SANITIZE STREQUAL "")
  message(FATAL_ERROR "CUMULUS_THREAD_SAFETY and CUMULUS_SANITIZE=${CUMULUS_SANITIZE} are separate "
                      "builds; configure each in its own build directory")
endif()
set(CUMULUS_WITH_TORCH OFF)
# Nothing this build makes is run: the analysis is the compiler front end's, so neither the
# optimizer nor debug information (a third of the build's time at -O3).
foreach(config DEBUG RELEASE RELWITHDEBINFO MINSIZEREL)
  set(CMAKE_CXX_FLAGS_${config} "-O0")
endforeach()
set(CUMULUS_THREAD_SAFETY_FLAGS -Wthread-safety -Werror=thread-safety)
# comm/reduce.cc's float16 conversions call compiler-rt helpers (__gnu_h2f_ieee) that libgcc,
# clang's default runtime on Debian, lacks; link clang's builtins (as tests/fuzz/fuzz.cmake does).
execute_process(COMMAND ${CMAKE_CXX_COMPILER} -rtlib=compiler-rt -print-libgcc-file-name
                OUTPUT_VARIABLE CUMULUS_CLANG_BUILTINS OUTPUT_STRIP_TRAILING_WHITESPACE)
link_libraries(${CUMULUS_CLANG_BUILTINS})
