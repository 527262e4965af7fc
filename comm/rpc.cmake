# The gRPC half of cumulus_comm (see comm/CMakeLists.txt): Store server/client, parameter
# server and the funnel client.
set(COMM_RPC_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/rpc_common.cc
  ${CMAKE_CURRENT_LIST_DIR}/store_server.cc
  ${CMAKE_CURRENT_LIST_DIR}/store_client.cc
  ${CMAKE_CURRENT_LIST_DIR}/parameter_server.cc
  ${CMAKE_CURRENT_LIST_DIR}/funnel.cc
)
