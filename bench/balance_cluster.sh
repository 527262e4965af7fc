#!/usr/bin/env bash
# Straggler-aware batch shares (`trainer.balance`) on the namespace cluster: HOSTS network-namespace
# hosts (launch/netns-cluster.sh) with one convnet worker each, one cumulus-run per host, and the
# last host made slow by a CPU quota (cgroup v1 `cpu.cfs_quota_us` on the whole host's process
# tree: a smaller instance, or one with a noisy neighbour). balance off and auto run back to back
# in one invocation (the order reversed on odd repetitions).
#
#   sudo bench/balance_cluster.sh [--hosts 4] [--quota 25] [--steps 300] [--every 20]
#        [--scenarios "static onoff"] [--on-step 80] [--off-step 200] [--reps 1] [--rate 1gbit]
#        [--id K] [--set KEY=VALUE]... [--out FILE] [--logs DIR]
#
# --quota Q: the slow host may use Q% of one core (the others share the cores freely: with 4
# workers on 2 cores each gets about 50%, so 25 is about half speed). static: the quota holds for
# the whole run; onoff: it is set once rank 0 logged step --on-step and lifted at --off-step (train
# records come every 10 steps, so the switch lands up to 10 steps later; the step is reported).
# Reports per run (JSON lines appended to --out, default bench/results/balance_cluster.jsonl, and a
# markdown table on stdout): samples/s (the "trained" record), auto/off, the compute rates of the
# first change under the quota and the ideal ratio they imply (Σr / (p·min r)), every change of
# the shares, and the steps each edge of the throttle took to move them.
# Needs root (namespaces, cgroups), iproute2 and the binaries built (cumulus-run, cumulus-train).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
python=${CUMULUS_PYTHON:-$ROOT/.venv/bin/python}  # the project environment, with torch
BIN=${BIN:-$ROOT/build/bin}
HOSTS=4; QUOTA=25; STEPS=300; EVERY=20; SCENARIOS="static onoff"; ON_STEP=80; OFF_STEP=200
REPS=1; RATE=1gbit; ID=${CUMULUS_NETNS_ID:-13}; SETS=(); OUT=$ROOT/bench/results/balance_cluster.jsonl
LOGS=""
CONFIG=$ROOT/configs/fashion_mnist_convnet.yaml
while (($#)); do
  case "$1" in
    --hosts) HOSTS=$2; shift 2 ;;
    --quota) QUOTA=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --every) EVERY=$2; shift 2 ;;
    --scenarios) SCENARIOS=$2; shift 2 ;;
    --on-step) ON_STEP=$2; shift 2 ;;
    --off-step) OFF_STEP=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --id) ID=$2; shift 2 ;;
    --set) SETS+=("$2"); shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --logs) LOGS=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "balance_cluster.sh: unknown flag $1 (see --help)" >&2; exit 2 ;;
  esac
done
for b in cumulus-run cumulus-train; do
  [[ -x $BIN/$b ]] || { echo "balance_cluster.sh: $BIN/$b missing: cmake --build build --target $b" >&2; exit 2; }
done
CG=/sys/fs/cgroup/cpu
[[ -f $CG/cpu.cfs_quota_us ]] || { echo "balance_cluster.sh: needs the cgroup v1 cpu controller at $CG" >&2; exit 2; }
SLOW=$CG/cumulus-balance-$ID
NS="$ROOT/launch/netns-cluster.sh --id $ID"
WORK=$(mktemp -d /tmp/cumulus-balance-cluster.XXXXXX)
cleanup() {
  $NS down >/dev/null 2>&1 || true
  if [[ -d $SLOW ]]; then
    while read -r p; do echo "$p" > $CG/cgroup.procs 2>/dev/null || true; done < $SLOW/cgroup.procs
    rmdir "$SLOW" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$SLOW" "$(dirname "$OUT")"
[[ -n $LOGS ]] && mkdir -p "$LOGS"
export CUMULUS_JOB_TOKEN=balance-cluster-bench
$NS down >/dev/null 2>&1 || true
$NS up "$HOSTS" --rate "$RATE" --burst 4kb
ADDR0=$($NS addr 0)
SETS_JSON=$("$python" -c 'import json,sys; print(json.dumps(sys.argv[1:]))' "${SETS[@]+"${SETS[@]}"}")

"$python" - "$HOSTS" "$QUOTA" "$STEPS" "$EVERY" "$SCENARIOS" "$ON_STEP" "$OFF_STEP" "$REPS" \
  "$BIN" "$CONFIG" "$NS" "$ADDR0" "$SLOW" "$WORK" "$OUT" "$LOGS" "$SETS_JSON" <<'PY'
import json, os, shutil, subprocess, sys, time

(hosts, quota, steps, every, scenarios, on_step, off_step, reps, bin_dir, config, ns, addr0, slow,
 work, out, logs, sets_json) = sys.argv[1:]
hosts, quota, steps, every = int(hosts), int(quota), int(steps), int(every)
on_step, off_step, reps = int(on_step), int(off_step), int(reps)
period = int(open(os.path.join(slow, "cpu.cfs_period_us")).read())

def set_quota(on):
    with open(os.path.join(slow, "cpu.cfs_quota_us"), "w") as f:
        f.write(str(period * quota // 100 if on else -1))

def records(path):
    try:
        with open(path) as f:
            return [json.loads(l) for l in f if l.strip().startswith("{")]
    except (OSError, ValueError):
        return []

def last_step(path):
    s = [r["step"] for r in records(path) if r.get("type") == "train"]
    return max(s) if s else 0

def confine(root_pid):
    todo = [root_pid]
    while todo:
        pid = todo.pop()
        try:
            with open(os.path.join(slow, "cgroup.procs"), "w") as f:
                f.write(str(pid))
            with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
                todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            pass

port = [29600]

def run(scenario, mode, rep):
    tag = "%s-%s-%d" % (scenario, mode, rep)
    run_dir = os.path.join(work, tag)
    port[0] += 1
    train = [os.path.join(bin_dir, "cumulus-train"), config,
             "--set", "trainer.max_steps=%d" % steps, "--set", "trainer.epochs=1000000",
             "--set", "trainer.threads=1", "--set", "trainer.log_every_steps=10",
             "--set", "trainer.balance=" + mode, "--set", "trainer.balance_every_steps=%d" % every,
             "--set", "checkpoint.every_steps=0", "--set", "trainer.run_dir=" + run_dir]
    for kv in json.loads(sets_json):
        train += ["--set", kv]
    set_quota(scenario == "static")
    procs = []
    for i in range(hosts):
        agent = [os.path.join(bin_dir, "cumulus-run"), "--nnodes", str(hosts), "--node-rank", str(i),
                 "--rdzv-endpoint", "%s:%d" % (addr0, port[0]), "--nproc-per-node", "1",
                 "--max-restarts", "0", "--log-dir", os.path.join(work, "logs-" + tag),
                 "--run-id", tag, "--"] + train
        cmd = ns.split() + ["run", str(i)] + agent
        procs.append(subprocess.Popen(cmd, stdout=open(os.path.join(work, "%s-n%d.log" % (tag, i)), "w"),
                                      stderr=subprocess.STDOUT))
    metrics = os.path.join(run_dir, "metrics.jsonl")
    switched = {}
    while any(p.poll() is None for p in procs):
        # The slow host: its whole process tree in the quota's cgroup (from out here: `ip netns
        # exec` mounts a sysfs of its own, without the cgroup hierarchy).
        confine(procs[-1].pid)
        if scenario == "onoff":
            seen = last_step(metrics)
            if "on" not in switched and seen >= on_step:
                set_quota(True)
                switched["on"] = seen
            elif "on" in switched and "off" not in switched and seen >= off_step:
                set_quota(False)
                switched["off"] = seen
        time.sleep(0.05)
    set_quota(False)
    if any(p.returncode != 0 for p in procs):
        for i in range(hosts):
            sys.stderr.write(open(os.path.join(work, "%s-n%d.log" % (tag, i))).read()[-1500:])
        raise SystemExit("balance_cluster.sh: %s failed" % tag)
    recs = records(metrics)
    trained = [r for r in recs if r.get("type") == "trained"][-1]
    batch = next(r["samples_per_sec"] * r["step_time_ms"] / 1000 for r in recs
                 if r.get("type") == "train")
    changes = [r for r in recs if r.get("type") == "balance" and r.get("reason") == "auto"]
    row = {"scenario": scenario, "mode": mode, "rep": rep, "hosts": hosts, "quota_pct": quota,
           "steps": trained["steps"], "seconds": trained["seconds"],
           "samples_per_s": trained["steps"] * round(batch) / trained["seconds"], "every": every,
           "changes": [{"step": r["step"], "shares": r["shares"], "rates": r["rates"],
                        "predicted_speedup": r["predicted_speedup"]} for r in changes]}
    throttled = [c for c in changes if c["step"] >= switched.get("on", 0)]
    if throttled:
        rates = throttled[0]["rates"]
        row["rates"] = rates
        row["ideal"] = sum(rates) / (len(rates) * min(rates))
    if switched:
        row["switched"] = switched
        row["adapt_steps"] = {edge: next((c["step"] - at for c in changes if c["step"] >= at), None)
                              for edge, at in switched.items()}
    if logs:
        shutil.copy(metrics, os.path.join(logs, tag + ".metrics.jsonl"))
    return row

rows = []
with open(out, "a") as sink:
    for rep in range(reps):
        for scenario in scenarios.split():
            for mode in (["off", "auto"] if rep % 2 == 0 else ["auto", "off"]):
                row = run(scenario, mode, rep)
                rows.append(row)
                sink.write(json.dumps(row) + "\n")
                sink.flush()
                print("%s %s rep %d: %.1f samples/s" % (scenario, mode, rep, row["samples_per_s"]),
                      file=sys.stderr)

print("| scenario | rep | off samples/s | auto samples/s | auto/off | rates (samples/s) | ideal "
      "| shares (step:shares) | quota on/off at step | adapted after (steps) |")
print("|---|---|---|---|---|---|---|---|---|---|")
for scenario in scenarios.split():
    for rep in range(reps):
        off = next(r for r in rows if r["scenario"] == scenario and r["rep"] == rep and r["mode"] == "off")
        auto = next(r for r in rows if r["scenario"] == scenario and r["rep"] == rep and r["mode"] == "auto")
        rates = " / ".join("%.0f" % r for r in auto["rates"]) if "rates" in auto else "no change"
        ideal = "%.2fx" % auto["ideal"] if "ideal" in auto else "-"
        shares = ", ".join("%d:%s" % (c["step"], "/".join(map(str, c["shares"])))
                           for c in auto["changes"]) or "equal"
        sw = auto.get("switched", {})
        ad = auto.get("adapt_steps", {})
        print("| %s | %d | %.1f | %.1f | %.2fx | %s | %s | %s | %s | %s |" % (
            scenario, rep, off["samples_per_s"], auto["samples_per_s"],
            auto["samples_per_s"] / off["samples_per_s"], rates, ideal, shares,
            "%s / %s" % (sw.get("on", "-"), sw.get("off", "-")) if sw else "whole run",
            "%s / %s" % (ad.get("on"), ad.get("off")) if ad else "-"))
PY
