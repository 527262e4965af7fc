#!/usr/bin/env bash
# A real Slurm cluster of one node on this machine, for tests and for trying cumulus-run under
# srun without a cluster: munged, slurmctld and slurmd from Debian's packages (slurmctld, slurmd,
# slurm-client, munge), each started on its own state directory, key and free ports, so nothing of
# the machine's own Slurm or munge (if any) is used or touched.
#
#   one-host-cluster.sh with -- CMD [ARGS...]
#
# starts the cluster, runs CMD with SLURM_CONF pointing at it (so srun, sbatch, squeue and scancel
# talk to it), and stops and removes everything when CMD exits, and on SIGINT and SIGTERM. The
# node is named after `hostname -s`, has 2 CPUs and partition "debug". CMD's exit code is this
# script's. Exit codes of its own: 2 usage, 3 not available (not root, or Slurm or munge not
# installed: `apt-get install slurmctld slurmd slurm-client munge`), 4 the cluster did not come up
# (the daemons' logs are printed).
set -euo pipefail

usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[[ "${1:-}" == "with" && "${2:-}" == "--" && $# -ge 3 ]] || usage
shift 2

if [[ $(id -u) -ne 0 ]]; then
  echo "one-host-cluster: needs root (slurmd runs jobs as their users)" >&2; exit 3
fi
for b in /usr/sbin/munged /usr/sbin/slurmctld /usr/sbin/slurmd /usr/bin/srun /usr/bin/sinfo; do
  [[ -x $b ]] || { echo "one-host-cluster: $b is missing; apt-get install slurmctld slurmd slurm-client munge" >&2; exit 3; }
done

dir=$(mktemp -d /tmp/cumulus-slurm.XXXXXX)
cleanup() {
  local pid
  for f in slurmd slurmctld munged; do
    if [[ -s $dir/$f.pid ]]; then
      pid=$(cat "$dir/$f.pid")
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A port nobody listens on, from a range Linux does not hand out as ephemeral by default.
free_port() {
  local p
  for _ in $(seq 200); do
    p=$((20000 + RANDOM % 12000))
    if ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; then echo $p; return; fi
  done
  echo "one-host-cluster: found no free port" >&2; exit 4
}
ctld_port=$(free_port)
slurmd_port=$(free_port)
while [[ $slurmd_port == "$ctld_port" ]]; do slurmd_port=$(free_port); done
host=$(hostname -s)

mkdir -p "$dir/state" "$dir/spool"
head -c 1024 /dev/urandom > "$dir/munge.key"
chmod 400 "$dir/munge.key"
cat > "$dir/slurm.conf" <<EOF
ClusterName=cumulus$$
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
AuthType=auth/munge
AuthInfo=socket=$dir/munge.sock
CredType=cred/munge
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SchedulerType=sched/builtin
ReturnToService=2
MpiDefault=none
KillWait=30
NodeName=$host NodeAddr=127.0.0.1 CPUs=2 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$dir/slurm.conf

did_not_start() {
  echo "one-host-cluster: $1 did not start; daemon logs follow" >&2
  tail -n 20 "$dir"/*.log >&2 || true
  exit 4
}
/usr/sbin/munged --force --key-file="$dir/munge.key" --socket="$dir/munge.sock" \
  --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge.seed" ||
  did_not_start munged
/usr/sbin/slurmctld -f "$SLURM_CONF" -i || did_not_start slurmctld
/usr/sbin/slurmd -f "$SLURM_CONF" -N "$host" || did_not_start slurmd
for _ in $(seq 300); do
  [[ $(sinfo -h -o %T 2>/dev/null) == idle ]] && break
  sleep 0.2
done
if [[ $(sinfo -h -o %T 2>/dev/null) != idle ]]; then
  echo "one-host-cluster: the node did not become idle within 60 s; daemon logs follow" >&2
  tail -n 20 "$dir"/*.log >&2 || true
  exit 4
fi

set +e
"$@"
rc=$?
set -e
exit $rc
