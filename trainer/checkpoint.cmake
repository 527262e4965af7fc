# cumulus_checkpoint: crash-consistent checkpoint directories (checkpoint.h), their MANIFEST and
# the FileSystem seam; and what the training loop needs around them: when a checkpoint is due
# (checkpoint_schedule.h), the preemption notice and stop-step agreement (<cumulus/preemption.h>,
# preemption.cc), and the resume decision (resume.h). Moving a live run's state into and out of a
# checkpoint (training_checkpoint.h) is the trainer's (cumulus_trainer). Included from
# trainer/CMakeLists.txt; cumulus_trainer links it. checkpoint.cc and checkpoint_snapshot.cc
# include LibTorch; the rest do not.
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
  ${CMAKE_CURRENT_LIST_DIR}/run_directory.cc)
target_include_directories(cumulus_checkpoint PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(cumulus_checkpoint PUBLIC cumulus_configs cumulus_data cumulus_models cumulus_proto
                      ${TORCH_LIBRARIES} Threads::Threads)
cumulus_warnings(cumulus_checkpoint)
