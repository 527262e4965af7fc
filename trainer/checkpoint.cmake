# cumulus_checkpoint: crash-consistent checkpoint directories (checkpoint.h), their MANIFEST and
# the FileSystem seam; and what the training loop needs around them: when a checkpoint is due
# (checkpoint_schedule.h), the preemption notice and stop-step agreement (preemption.h), and the
# resume decision (resume.h), and moving a live run's state into and out of a snapshot
# (training_checkpoint.h). Included from trainer/CMakeLists.txt; cumulus_trainer links it.
# checkpoint.cc, checkpoint_snapshot.cc and training_checkpoint.cc include LibTorch; the rest do not.
add_library(cumulus_checkpoint STATIC
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint.cc
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint_manifest.cc
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint_schedule.cc
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint_snapshot.cc
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint_state_proto.cc
  ${CMAKE_CURRENT_LIST_DIR}/file_system.cc
  ${CMAKE_CURRENT_LIST_DIR}/file_system_fault.cc
  ${CMAKE_CURRENT_LIST_DIR}/preemption.cc
  ${CMAKE_CURRENT_LIST_DIR}/resume.cc
  ${CMAKE_CURRENT_LIST_DIR}/run_directory.cc
  ${CMAKE_CURRENT_LIST_DIR}/training_checkpoint.cc)
target_include_directories(cumulus_checkpoint PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(cumulus_checkpoint PUBLIC cumulus_configs cumulus_data cumulus_models cumulus_proto
                      ${TORCH_LIBRARIES} Threads::Threads)
cumulus_warnings(cumulus_checkpoint)
