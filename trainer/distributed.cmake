# cumulus_distributed: multi-worker gradient sync — bucket layout, the DDP-style overlapping
# GradientSync, the process group built from the launcher's environment, the Chrome trace
# recorder, the flat parameter buffers that the optimizer steps over and the sync reduces, and the
# step watchdog (<cumulus/step_watchdog.h>, public like the rest of this library's types).
# Included by trainer/CMakeLists.txt before cumulus_trainer, which links it.
# Only distributed_sync.cc and flat_parameters.cc include LibTorch.
add_library(cumulus_distributed STATIC
  ${CMAKE_CURRENT_LIST_DIR}/bucket_layout.cc
  ${CMAKE_CURRENT_LIST_DIR}/distributed_sync.cc
  ${CMAKE_CURRENT_LIST_DIR}/flat_parameters.cc
  ${CMAKE_CURRENT_LIST_DIR}/process_group.cc
  ${CMAKE_CURRENT_LIST_DIR}/step_watchdog.cc
  ${CMAKE_CURRENT_LIST_DIR}/trace.cc)
target_include_directories(cumulus_distributed PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(cumulus_distributed PUBLIC cumulus_comm cumulus_configs
                      nlohmann_json::nlohmann_json ${TORCH_LIBRARIES} Threads::Threads)
cumulus_warnings(cumulus_distributed)
