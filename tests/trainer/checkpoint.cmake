# Checkpoint tests, compiled into trainer_test.
set(TRAINER_CHECKPOINT_TESTS
  ${CMAKE_CURRENT_SOURCE_DIR}/checkpoint_manifest_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/checkpoint_test.cc)
