#pragma once
// Every environment variable that cumulus-run sets for its workers and that a worker reads: the
// one list, used on both sides (launch/launcher.cc writes them; base/run_env.cc reads them, except
// the in-place recovery ones, which api/elastic_group.cc reads through the same EnvLookup).
// What each means: docs/launch.md, "Environment of each worker".

namespace cumulus::base::env {

// torchrun's, with torchrun's meaning.
inline constexpr char kRank[] = "RANK";
inline constexpr char kLocalRank[] = "LOCAL_RANK";
inline constexpr char kWorldSize[] = "WORLD_SIZE";
inline constexpr char kLocalWorldSize[] = "LOCAL_WORLD_SIZE";
inline constexpr char kGroupRank[] = "GROUP_RANK";
inline constexpr char kRoleRank[] = "ROLE_RANK";
inline constexpr char kMasterAddr[] = "MASTER_ADDR";
inline constexpr char kMasterPort[] = "MASTER_PORT";
// torchrun's count of worker-group restarts: under torchrun, with no CUMULUS_GENERATION, each
// restart is a generation of its own (base/run_env.h).
inline constexpr char kTorchelasticRestartCount[] = "TORCHELASTIC_RESTART_COUNT";

// Cumulus's own.
inline constexpr char kStore[] = "CUMULUS_STORE";  // HOST:PORT of the Store cumulus-run hosts
inline constexpr char kRunId[] = "CUMULUS_RUN_ID";
inline constexpr char kRestartCount[] = "CUMULUS_RESTART_COUNT";
inline constexpr char kGeneration[] = "CUMULUS_GENERATION";
inline constexpr char kJobToken[] = "CUMULUS_JOB_TOKEN";
inline constexpr char kPsEndpoint[] = "CUMULUS_PS_ENDPOINT";
inline constexpr char kLogDir[] = "CUMULUS_LOG_DIR";
inline constexpr char kBindHost[] = "CUMULUS_BIND_HOST";
inline constexpr char kPreemptionGrace[] = "CUMULUS_PREEMPTION_GRACE";
// "1" when node 0 serves the job's live metrics (cumulus-run --metrics-port): the workers send
// their records and status to the Store for it.
inline constexpr char kLiveMetrics[] = "CUMULUS_LIVE_METRICS";
// Recovery in place (launch.recovery: in_place).
inline constexpr char kRecovery[] = "CUMULUS_RECOVERY";
inline constexpr char kMemberId[] = "CUMULUS_MEMBER_ID";
inline constexpr char kMinWorkers[] = "CUMULUS_MIN_WORKERS";
inline constexpr char kMaxWorkers[] = "CUMULUS_MAX_WORKERS";
inline constexpr char kJoin[] = "CUMULUS_JOIN";

// Read by the launcher or the data plane, set by a user (not by cumulus-run).
inline constexpr char kRdzvPort[] = "CUMULUS_RDZV_PORT";        // under Slurm: the Store's port
inline constexpr char kTransport[] = "CUMULUS_TRANSPORT";       // auto | tcp | unix | shm
inline constexpr char kSpinMicroseconds[] = "CUMULUS_SPIN_US";  // a receive's busy-wait
inline constexpr char kSpotLaunch[] = "CUMULUS_SPOT_LAUNCH";    // cumulus-spot's launch index
inline constexpr char kMalloc[] = "CUMULUS_MALLOC";  // training | default (<cumulus/allocator.h>)

// Read by the torch.distributed backend's Python side (python/cumulus/__init__.py,
// BackendOptions' defaults; docs/python.md, "Options"), which includes nothing private and so
// spells them itself; tests/python/backend_test.py checks that each one it reads is here.
inline constexpr char kAlgorithm[] = "CUMULUS_ALGORITHM";      // auto | ring | tree | ...
inline constexpr char kCompression[] = "CUMULUS_COMPRESSION";  // none | bf16
inline constexpr char kCostModel[] = "CUMULUS_COST_MODEL";     // a cumulus-bench calibrate file

}  // namespace cumulus::base::env
