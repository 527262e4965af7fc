# Checkpoint tests, compiled into trainer_test: storage, schedule, preemption, resume.
set(TRAINER_CHECKPOINT_TESTS
  ${CMAKE_CURRENT_SOURCE_DIR}/checkpoint_manifest_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/checkpoint_room_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/checkpoint_schedule_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/file_system_fault.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/checkpoint_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/preemption_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/resume_process_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/resume_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/run_directory_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/guard_process_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/spot_traces_test.cc)
