# Shared helpers for the per-folder CMakeLists.

# Warnings for our own code only (LibTorch and gRPC headers are included as SYSTEM), and the
# thread-safety analysis in a CUMULUS_THREAD_SAFETY build (thread_safety.cmake).
# GCC 12 in C++20 mode warns, falsely, that std::string's operator+ on a literal and a temporary
# copies 2^63 bytes (-Wrestrict, -Wstringop-overflow; GCC bug 105329, fixed in 13): those two are
# off there, and only there.
set(CUMULUS_GCC12_FALSE_WARNINGS "")
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  set(CUMULUS_GCC12_FALSE_WARNINGS -Wno-restrict -Wno-stringop-overflow)
endif()
function(cumulus_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter
                                           ${CUMULUS_GCC12_FALSE_WARNINGS}
                                           ${CUMULUS_THREAD_SAFETY_FLAGS})
endfunction()

# cumulus_test(NAME <binary> SOURCES <files...> LIBS <libs...>)
# One gtest binary per folder; every TEST becomes its own ctest entry.
include(GoogleTest)
function(cumulus_test)
  cmake_parse_arguments(T "" "NAME" "SOURCES;LIBS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main Threads::Threads)
  target_compile_definitions(${T_NAME} PRIVATE
    CUMULUS_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    CUMULUS_BINARY_DIR="${PROJECT_BINARY_DIR}")
  if(CUMULUS_PYTHON)
    # The project environment's interpreter, with the torch the build links (cmake/torch.cmake).
    target_compile_definitions(${T_NAME} PRIVATE CUMULUS_PYTHON="${CUMULUS_PYTHON}")
  endif()
  cumulus_warnings(${T_NAME})
  # Each test is "<binary>.<Suite>.<Test>", so `ctest -R trainer_test` runs one binary's tests.
  gtest_discover_tests(${T_NAME} DISCOVERY_TIMEOUT 120 TEST_PREFIX "${T_NAME}."
    PROPERTIES TIMEOUT 300 ENVIRONMENT "OMP_NUM_THREADS=1")
endfunction()
