#!/usr/bin/env bash
# The cumulus torch.distributed backend under Slurm, on a one-node Slurm cluster of its own:
#
#     tests/python/slurm_check.sh            (as root, after `make build`; needs slurm-wlm, munge)
#
# It starts munged, slurmctld and slurmd with a private configuration, key, sockets and ports
# under a temporary directory (nothing in /etc is read or written), then launches
# tests/python/backend_worker.py's `launched` case (an all-reduce, send/recv around the ring and
# an all_to_all_single, each checked) three ways a Slurm user does:
#   1. srun -n 3: one task per rank, RANK/WORLD_SIZE from SLURM_PROCID/SLURM_NTASKS, env://
#      (srun sets SLURM_LOCALID, not LOCAL_RANK; the backend reads neither);
#   2. srun -n 1 torchrun --standalone --nproc-per-node 2;
#   3. srun -n 1 cumulus-run --nproc-per-node 2 (which reads the Slurm job itself).
# Each must report every rank ok. It stops the daemons and removes the directory on exit.
# Not part of `make test`: it needs Slurm's daemons, which a CI machine does not run.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
for tool in munged slurmctld slurmd srun; do
  command -v "$tool" >/dev/null || { echo "slurm_check: $tool not found (apt-get install slurm-wlm munge)" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "slurm_check: run as root (slurmd starts the tasks as their user)" >&2; exit 2; }
[ -x "$ROOT/build/bin/cumulus-run" ] || { echo "slurm_check: run 'make build' first" >&2; exit 2; }

DIR=$(mktemp -d /tmp/cumulus-slurm.XXXXXX)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
  rm -rf "$DIR"
}
trap cleanup EXIT

free_port() { "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
NODE=$(hostname -s)
mkdir -p "$DIR"/{munge,state,spool,logs}
head -c 1024 /dev/urandom >"$DIR/munge/key"
chmod 400 "$DIR/munge/key"
munged --key-file="$DIR/munge/key" --socket="$DIR/munge/socket" --pid-file="$DIR/munge/pid" \
  --log-file="$DIR/munge/log" --seed-file="$DIR/munge/seed" --force
PIDS+=("$(cat "$DIR/munge/pid")")
cat >"$DIR/slurm.conf" <<EOF
ClusterName=cumulus-check
SlurmctldHost=$NODE
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/socket
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/linear
SchedulerType=sched/builtin
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldLogFile=$DIR/logs/slurmctld.log
SlurmdLogFile=$DIR/logs/slurmd.log
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
ReturnToService=2
MpiDefault=none
NodeName=$NODE CPUs=$(nproc) State=UNKNOWN
PartitionName=check Nodes=$NODE Default=YES MaxTime=10 State=UP OverSubscribe=FORCE:4
EOF
export SLURM_CONF=$DIR/slurm.conf
slurmctld -f "$SLURM_CONF"
for _ in $(seq 100); do [ -s "$DIR/slurmctld.pid" ] && break; sleep 0.1; done
PIDS+=("$(cat "$DIR/slurmctld.pid")")
slurmd -f "$SLURM_CONF"
for _ in $(seq 100); do [ -s "$DIR/slurmd.pid" ] && break; sleep 0.1; done
PIDS+=("$(cat "$DIR/slurmd.pid")")
for _ in $(seq 300); do
  sinfo -h -o %t 2>/dev/null | grep -qx idle && break
  sleep 0.1
done
sinfo -h -o %t | grep -qx idle || { echo "slurm_check: the node never became idle:" >&2; tail "$DIR"/logs/*.log >&2; exit 1; }

export PYTHONPATH=$ROOT/build/python OMP_NUM_THREADS=1
WORKER=$ROOT/tests/python/backend_worker.py
failed=0
check() {  # NAME WORLD COMMAND...: every rank 0..WORLD-1 reports ok
  local name=$1 world=$2
  shift 2
  local out start
  start=$(date +%s%N)
  if ! out=$(cd "$DIR" && timeout 300 "$@" 2>&1); then
    echo "FAIL $name: exit status $?"$'\n'"$out"
    failed=1
    return
  fi
  local ok
  ok=$(grep -o '{"rank": [0-9]*, "world": '"$world"', "restart": 0, "ok": true}' <<<"$out" | sort | uniq | wc -l)
  if [ "$ok" != "$world" ]; then
    echo "FAIL $name: $ok of $world ranks reported ok"$'\n'"$out"
    failed=1
    return
  fi
  local tenths=$((($(date +%s%N) - start) / 100000000))
  printf 'ok   %s (%d ranks, %d.%d s)\n' "$name" "$world" $((tenths / 10)) $((tenths % 10))
}
PORT=$(free_port)
check "srun -n 3, env:// from SLURM_PROCID and SLURM_NTASKS" 3 \
  srun -n 3 --overcommit bash -c "RANK=\$SLURM_PROCID WORLD_SIZE=\$SLURM_NTASKS MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT exec $PYTHON $WORKER launched"
check "srun -n 1 torchrun --standalone --nproc-per-node 2" 2 \
  srun -n 1 "$PYTHON" -m torch.distributed.run --standalone --nproc-per-node 2 "$WORKER" launched
check "srun -n 1 cumulus-run --nproc-per-node 2" 2 \
  srun -n 1 "$ROOT/build/bin/cumulus-run" --nproc-per-node 2 -- "$PYTHON" "$WORKER" launched
echo "slurm $(srun --version | cut -d' ' -f2), torch $("$PYTHON" -c 'import torch; print(torch.__version__)'): $([ $failed = 0 ] && echo all passed || echo FAILED)"
exit $failed
