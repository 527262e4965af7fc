# cumulus-run under a real one-host Slurm (launch/slurm/one-host-cluster.sh), compiled into
# launch_test; it skips itself where Slurm or root is missing.
set(LAUNCH_SLURM_TESTS ${CMAKE_CURRENT_SOURCE_DIR}/slurm_cluster_test.cc)
