# cumulus_checkpoint: crash-consistent checkpoint directories (checkpoint.h), their MANIFEST and
# the FileSystem seam; and what the training loop needs around them: when a checkpoint is due
# (checkpoint_schedule.h), the preemption notice and stop-step agreement (preemption.h), and the
# resume decision (resume.h). Included from trainer/CMakeLists.txt; cumulus_trainer links it.
# checkpoint.cc and checkpoint_snapshot.cc include LibTorch headers; the rest do not.
add_library(cumulus_checkpoint STATIC
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint.cc
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint_manifest.cc
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint_schedule.cc
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint_snapshot.cc
  ${CMAKE_CURRENT_LIST_DIR}/file_system.cc
  ${CMAKE_CURRENT_LIST_DIR}/file_system_fault.cc
  ${CMAKE_CURRENT_LIST_DIR}/preemption.cc
  ${CMAKE_CURRENT_LIST_DIR}/resume.cc)
target_include_directories(cumulus_checkpoint PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(cumulus_checkpoint PUBLIC cumulus_configs cumulus_data cumulus_proto
                      ${TORCH_LIBRARIES} Threads::Threads)
cumulus_warnings(cumulus_checkpoint)
