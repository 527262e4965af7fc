# The gRPC half of comm_test (see tests/comm/CMakeLists.txt).
list(APPEND COMM_RPC_TESTS
  ${CMAKE_CURRENT_LIST_DIR}/store_server_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/store_client_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/parameter_server_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/funnel_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/bench_cli_test.cc
)
# parameter_server_test runs the real cumulus-ps binary, bench_cli_test cumulus-bench; comm_test
# is defined after this file.
cmake_language(DEFER DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} CALL add_dependencies comm_test cumulus-ps
               cumulus-bench)
