# Spot simulator tests, compiled into launch_test.
set(LAUNCH_SPOT_TESTS
  ${CMAKE_CURRENT_SOURCE_DIR}/spot_report_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/spot_runner_test.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/spot_trace_test.cc)
