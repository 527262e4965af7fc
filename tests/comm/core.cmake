# Tests of the comm core (see comm/core.cmake). One binary, comm_test; the process tests re-run
# this same binary as their worker (see process_test.cc), so there is no second executable.
# Each file tests the comm/ file of the same name (net/socket_test.cc tests comm/net/socket.cc);
# process_test.cc runs the communicator across processes.
set(COMM_CORE_TESTS
  ${CMAKE_CURRENT_SOURCE_DIR}/communicator_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/store_keys_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/cost_model_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/error_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/memory_store_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/reduce_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/rendezvous_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/ring_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/transport_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/tree_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/exchange_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/point_to_point_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/topology_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/hierarchical_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/types_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/work_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/shm/channel_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/net/frame_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/net/handshake_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/net/socket_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/net/transfer_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/file_store.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/quorum_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/process_test.cc)

# comm_perf: a measuring tool (not a test) for all-reduce throughput and latency between
# processes; see its header. Built on request: cmake --build build --target comm_perf
add_executable(comm_perf EXCLUDE_FROM_ALL ${CMAKE_CURRENT_SOURCE_DIR}/comm_perf.cc
                                         ${CMAKE_CURRENT_SOURCE_DIR}/file_store.cc)
target_link_libraries(comm_perf PRIVATE cumulus_comm)
cumulus_warnings(comm_perf)
