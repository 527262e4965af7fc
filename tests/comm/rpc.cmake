# The gRPC half of comm_test (see tests/comm/CMakeLists.txt).
set(COMM_RPC_TESTS
  ${CMAKE_CURRENT_LIST_DIR}/store_server_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/store_client_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/parameter_server_test.cc
  ${CMAKE_CURRENT_LIST_DIR}/funnel_test.cc
)
