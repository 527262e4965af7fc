# comm core: types, reductions, MemoryStore, TCP transport, rendezvous, tree, ring, topology,
# hierarchical, communicator, cost model. Included by comm/CMakeLists.txt; no LibTorch here.
set(COMM_CORE_SOURCES
  ${CMAKE_CURRENT_SOURCE_DIR}/types.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/error.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/reduce.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/memory_store.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/transport.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/net/socket.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/net/handshake.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/net/transfer.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/shm/channel.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/rendezvous.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/ring.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/tree.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/exchange.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/point_to_point.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/topology.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/hierarchical.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/work.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/communicator.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/quorum.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/cost_model.cc)
# The kernels are the compute hot path: vectorize them whatever the build type.
set_source_files_properties(${CMAKE_CURRENT_SOURCE_DIR}/reduce.cc PROPERTIES COMPILE_OPTIONS "-O3")
