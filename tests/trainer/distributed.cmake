# Tests of cumulus_distributed; they join trainer_test (tests/trainer/CMakeLists.txt).
set(TRAINER_DISTRIBUTED_TESTS
  ${CMAKE_CURRENT_SOURCE_DIR}/bucket_layout_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/compression_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/distributed_group_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/distributed_sync_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/flat_parameters_test.cc)
# cumulus-run + cumulus-train as processes (needs both binaries built).
list(APPEND TRAINER_DISTRIBUTED_TESTS ${CMAKE_CURRENT_SOURCE_DIR}/distributed_e2e_test.cc)
