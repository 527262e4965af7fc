# The spot-preemption simulator (spot_runner.h): its sources join cumulus_launch (so launch_test
# covers them without another library), and cumulus-spot is its command line. No LibTorch.
target_sources(cumulus_launch PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/spot_report.cc
  ${CMAKE_CURRENT_LIST_DIR}/spot_runner.cc
  ${CMAKE_CURRENT_LIST_DIR}/spot_trace.cc)

add_executable(cumulus-spot ${CMAKE_CURRENT_LIST_DIR}/spot_main.cc)
target_link_libraries(cumulus-spot PRIVATE cumulus_launch)
cumulus_warnings(cumulus-spot)
