# Binaries of comm/ (included by comm/CMakeLists.txt once cumulus_comm exists).
add_executable(cumulus-ps ${CMAKE_CURRENT_LIST_DIR}/ps_main.cc)
target_link_libraries(cumulus-ps PRIVATE cumulus_comm)
cumulus_warnings(cumulus-ps)
