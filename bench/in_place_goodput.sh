#!/bin/bash
# Goodput of recovery in place against recovery by restart (docs/benchmarks.md, "Recovery in
# place against restart"), in one run: for each repetition, the same job under a seeded fault
# schedule with `--recovery in_place`, with `--recovery restart`, and uninterrupted, back to
# back (odd repetitions run them in the reverse order, so a drift of the machine's speed does not
# always favour one side). All runs train the same number of steps; goodput = the uninterrupted
# run's wall time / the disrupted run's.
#
#   bench/in_place_goodput.sh [--scenarios "A B"] [--modes "in_place restart none"] [--reps 1]
#       [--seed 0] [--steps 2000] [--steps-a N] [--steps-b N] [--interval 60] [--notice 10]
#       [--relaunch-delay 5] [--checkpoint-seconds 60] [--config configs/fashion_mnist_convnet.yaml]
#       [--set KEY=VALUE]... [--timeout 1200] [--bin-dir build/bin] [--out FILE] [--logs DIR]
#
# A, preemption with notice: 4 nodes x 1 worker on loopback (4 cumulus-run agents, --nnodes 2:4,
#   --node-rank 0..3, one rendezvous endpoint, one exported CUMULUS_JOB_TOKEN). About every
#   --interval seconds (uniform in 0.5x..1.5x, seeded) one running node other than node 0 gets a
#   notice (SIGTERM to its agent); if it still runs --notice seconds later, the agent and its
#   workers are SIGKILLed (the instance is gone). --relaunch-delay seconds after its agent is gone,
#   the node's agent starts again with the same --node-rank (a replacement instance). In restart
#   mode an agent that exits 75 because the group stopped is relaunched the same way.
# B, SIGKILL without notice: one cumulus-run --standalone --nproc-per-node 4 --max-restarts 100;
#   about every --interval seconds a random worker (a cumulus-train child of the agent) is
#   SIGKILLed.
# Both: a checkpoint every --checkpoint-seconds, trainer.max_steps = --steps (per scenario with
# --steps-a/--steps-b); in A, trainer.threads = cores / 4 (each agent would otherwise give its one
# worker every core of the machine; --set trainer.threads=N overrides it). The uninterrupted run
# ("none") uses the default recovery (restart), so the in-place figure includes any steady-state
# cost of recovery in place. Every run gets a fresh run directory. Besides the goodput it reports, as min/median/max:
#   fault->step   in place: from the fault (B: the kill; A: the notice) to the completion of the
#                 first step after the group re-formed without the node (reform record); restart:
#                 to rank 0's first step after the restart (its console line, time-stamped here).
#   join->step    in place: from the replacement's start (A: the relaunch; B: the kill, as the
#                 agent starts the replacement at once) to the first step after it joined;
#                 restart: from the relaunch to rank 0's next first step (A only).
#   pause         in place only: detected -> next step of each reform record, i.e. the time the
#                 group did not train (failure, leave, join).
# One JSON line per run goes to --out (default bench/results/in_place.jsonl); a markdown table
# goes to stdout. --logs DIR keeps each run's time-stamped agent output and metrics there.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
python=${CUMULUS_PYTHON:-$root/.venv/bin/python}  # the project environment, with torch
scenarios="A B"; modes="in_place restart none"; reps=1; seed=0; steps=2000; steps_a=""; steps_b=""
interval=60; notice=10; relaunch=5; ckpt_s=60; timeout=1200
config="$root/configs/fashion_mnist_convnet.yaml"; bin_dir="$root/build/bin"
out="$here/results/in_place.jsonl"; sets=(); logs=""
while [ $# -gt 0 ]; do
  case "$1" in
    --scenarios) scenarios="$2"; shift 2 ;;
    --modes) modes="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --steps-a) steps_a="$2"; shift 2 ;;
    --steps-b) steps_b="$2"; shift 2 ;;
    --interval) interval="$2"; shift 2 ;;
    --notice) notice="$2"; shift 2 ;;
    --relaunch-delay) relaunch="$2"; shift 2 ;;
    --checkpoint-seconds) ckpt_s="$2"; shift 2 ;;
    --config) config="$2"; shift 2 ;;
    --set) sets+=("$2"); shift 2 ;;
    --timeout) timeout="$2"; shift 2 ;;
    --bin-dir) bin_dir="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --logs) logs="$2"; shift 2 ;;
    -h|--help) sed -n '2,37p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "in_place_goodput.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
for b in cumulus-run cumulus-train; do
  [ -x "$bin_dir/$b" ] || { echo "in_place_goodput.sh: $bin_dir/$b is missing; build it first" >&2; exit 2; }
done
[ -f "$config" ] || { echo "in_place_goodput.sh: no config $config" >&2; exit 2; }
work="$(mktemp -d /tmp/cumulus-in-place-goodput.XXXXXX)"
trap 'rm -rf "$work"' EXIT
if [ -n "$logs" ]; then mkdir -p "$logs"; fi
mkdir -p "$(dirname "$out")"
CUMULUS_JOB_TOKEN=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n')
export CUMULUS_JOB_TOKEN

# driver SCENARIO MODE REP STEPS: runs one job under the schedule (none: no faults) and prints
# its JSON line. The process handling (start, signal, relaunch, time-stamped output) is Python.
driver() {
  local set_json
  set_json=$("$python" -c 'import json,sys; print(json.dumps(sys.argv[1:]))' "${sets[@]+"${sets[@]}"}")
  "$python" - "$1" "$2" "$3" "$4" "$seed" "$interval" "$notice" "$relaunch" "$ckpt_s" \
    "$timeout" "$config" "$bin_dir" "$work" "$set_json" <<'PY'
import json, os, random, re, signal, socket, statistics, subprocess, sys, threading, time

(scenario, mode, rep, steps, seed, interval, notice, relaunch, ckpt_s, timeout, config, bin_dir,
 work, set_json) = sys.argv[1:]
rep, steps, seed = int(rep), int(steps), int(seed)
interval, notice, relaunch = float(interval), float(notice), float(relaunch)
ckpt_s, timeout = float(ckpt_s), float(timeout)
tag = "%s-%s-%d" % (scenario, mode, rep)
run_dir = os.path.join(work, tag)
log_dir = os.path.join(work, tag + "-logs")
os.makedirs(run_dir)
train = [os.path.join(bin_dir, "cumulus-train"), config, "--set", "trainer.max_steps=%d" % steps,
         "--set", "trainer.epochs=1000000",
         "--set", "checkpoint.every_seconds=%g" % ckpt_s, "--set", "trainer.run_dir=" + run_dir]
if scenario == "A":  # 4 agents on one machine each see all its cores: share them instead
    train += ["--set", "trainer.threads=%d" % max(1, (os.cpu_count() or 1) // 4)]
for kv in json.loads(set_json):
    train += ["--set", kv]
recovery = [] if mode == "none" else ["--recovery", mode]

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port

port = free_port()
run_id = "ipg-" + tag.lower().replace("_", "")

def agent_cmd(node):
    run = [os.path.join(bin_dir, "cumulus-run"), "--run-id", run_id, "--log-dir", log_dir,
           "--max-restarts", "100"] + recovery
    if scenario == "A":
        run += ["--nnodes", "2:4", "--node-rank", str(node), "--rdzv-endpoint",
                "127.0.0.1:%d" % port, "--nproc-per-node", "1"]
    else:
        run += ["--standalone", "--nproc-per-node", "4"]
    return run + ["--"] + train

lock = threading.Lock()
first_steps = []   # (unix s, step) of rank 0's "first step N completed" lines
events = []        # dicts with "t" (unix s) and "kind"
console = open(os.path.join(work, tag + ".log"), "w")
first_re = re.compile(r"first step (\d+) completed")

def note(kind, **kw):
    with lock:
        events.append(dict(t=time.time(), kind=kind, **kw))

class Agent:
    def __init__(self, node, launch):
        self.node, self.launch = node, launch
        self.proc = subprocess.Popen(agent_cmd(node), stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.reader.start()

    def read(self):
        for raw in self.proc.stdout:
            t = time.time()
            line = raw.decode(errors="replace").rstrip("\n")
            m = first_re.search(line)
            with lock:
                console.write("%.3f [node%d.%d] %s\n" % (t, self.node, self.launch, line))
                if m:
                    first_steps.append((t, int(m.group(1))))

    def workers(self):
        # Each worker is the child of its keeper, the agent's child (launch/worker_keeper.h).
        def children(pid):
            try:
                return [int(c) for task in os.listdir("/proc/%d/task" % pid)
                        for c in open("/proc/%d/task/%s/children" % (pid, task)).read().split()]
            except OSError:
                return []
        pids = [w for keeper in children(self.proc.pid) for w in children(keeper)]
        found = []
        for p in pids:
            try:
                with open("/proc/%d/cmdline" % p, "rb") as f:
                    if b"cumulus-train" in f.read():
                        found.append(p)
            except OSError:
                pass
        return sorted(found)

    def kill_instance(self):
        for p in self.workers():
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

rng = random.Random(seed * 1000 + (1 if scenario == "A" else 2))
nodes = 4 if scenario == "A" else 1
launches = [0] * nodes
agents = {}
t0 = time.time()
for n in range(nodes):
    agents[n] = Agent(n, 0)
    note("start", node=n)
    if n == 0 and scenario == "A":
        time.sleep(0.2)  # node 0 hosts the Store; the others would wait for it anyway
next_fault = t0 + interval * rng.uniform(0.5, 1.5)
noticed = {}       # node -> notice time
killed = set()     # nodes SIGKILLed after their notice, not relaunched yet
replacing = set()  # nodes whose next launch replaces a preempted instance
relaunch_at = {}   # node -> when its agent starts again
done = failed = False
end = None
reason = ""
while not done:
    now = time.time()
    if now - t0 > timeout:
        reason = "timeout after %.0f s" % timeout
        failed = True
        break
    # Agents that ended.
    for n, a in list(agents.items()):
        rc = a.proc.poll()
        if rc is None:
            continue
        note("exit", node=n, rc=rc)
        del agents[n]
        was_noticed = noticed.pop(n, None) is not None or n in killed
        if n == 0 and rc == 0:
            end = now
            done = True
        elif rc == 0:
            pass  # this node is done; the job ends with node 0
        elif scenario == "A" and (rc == 75 or was_noticed):
            relaunch_at[n] = now + relaunch  # preempted, or the group stopped (restart mode)
            if was_noticed:
                replacing.add(n)
        else:
            reason = "node %d's agent exited %d" % (n, rc)
            failed = True
    if done or failed:
        break
    # Replacement instances.
    for n, t in list(relaunch_at.items()):
        if now >= t:
            del relaunch_at[n]
            killed.discard(n)
            launches[n] += 1
            agents[n] = Agent(n, launches[n])
            note("relaunch", node=n, replacement=n in replacing)
            replacing.discard(n)
    # Notices that ran out.
    for n, t in list(noticed.items()):
        if now >= t + notice and n in agents:
            agents[n].kill_instance()
            note("killed_after_notice", node=n)
            killed.add(n)
            del noticed[n]
    # The schedule.
    if mode != "none" and now >= next_fault:
        if scenario == "A":
            eligible = sorted(n for n in agents if n != 0 and n not in noticed)
            if eligible:
                n = rng.choice(eligible)
                agents[n].proc.send_signal(signal.SIGTERM)
                noticed[n] = time.time()
                note("notice", node=n)
                next_fault = now + interval * rng.uniform(0.5, 1.5)
        else:
            pids = agents[0].workers() if 0 in agents else []
            if len(pids) == 4:  # a full group (restart mode: not while it restarts)
                victim = rng.choice(pids)
                os.kill(victim, signal.SIGKILL)
                note("kill", pid=victim)
                next_fault = now + interval * rng.uniform(0.5, 1.5)
    time.sleep(0.05)
# The job is over (node 0 done) or failed: stop what is left, as a cluster would.
deadline = time.time() + (15 if done else 0)
for n, a in agents.items():
    while a.proc.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    if a.proc.poll() is None:
        a.kill_instance()
        note("stopped_at_end", node=n)
    a.proc.wait()
    a.reader.join(5)
console.close()

metrics = []
mpath = os.path.join(run_dir, "metrics.jsonl")
if os.path.exists(mpath):
    with open(mpath) as f:
        for line in f:
            try:
                metrics.append(json.loads(line))
            except ValueError:
                pass
reforms = [m for m in metrics if m.get("type") == "reform"]
trained = [m for m in metrics if m.get("type") == "trained"]
accounts = [m for m in metrics if m.get("type") == "goodput"]
last_step = max([m.get("step", 0) for m in metrics if "step" in m] or [0])

def dist(xs):
    if not xs:
        return None
    return {"n": len(xs), "min": round(min(xs), 3), "median": round(statistics.median(xs), 3),
            "max": round(max(xs), 3)}

faults = [e for e in events if e["kind"] in ("notice", "kill")]
fault_to_step, join_to_step = [], []
if mode == "in_place":
    for e in faults:
        causes = ("leave", "failure") if e["kind"] == "notice" else ("failure",)
        r = next((r for r in reforms if r["cause"] in causes and
                  r["detected_unix_ms"] >= e["t"] * 1000 - 50), None)
        if r:
            fault_to_step.append(r["next_step_unix_ms"] / 1000 - e["t"])
    starts = [e["t"] for e in events if e["kind"] == "kill" or
              (e["kind"] == "relaunch" and e["replacement"])]
    for t in starts:
        r = next((r for r in reforms if r["cause"] == "join" and
                  r["detected_unix_ms"] >= t * 1000 - 50), None)
        if r:
            join_to_step.append(r["next_step_unix_ms"] / 1000 - t)
elif mode == "restart":
    for e in faults:
        s = next((t for t, _ in first_steps if t > e["t"]), None)
        if s:
            fault_to_step.append(s - e["t"])
    if scenario == "A":
        for e in events:
            if e["kind"] == "relaunch" and e["replacement"]:
                s = next((t for t, _ in first_steps if t > e["t"]), None)
                if s:
                    join_to_step.append(s - e["t"])
pauses = {}
for c in ("failure", "leave", "join"):
    d = dist([(r["next_step_unix_ms"] - r["detected_unix_ms"]) / 1000 for r in reforms
              if r["cause"] == c])
    if d:
        pauses[c] = d
result = {
    "scenario": scenario, "mode": mode, "rep": rep, "seed": seed, "steps": steps,
    "last_step": last_step, "completed": done and last_step >= steps, "reason": reason,
    "wall_s": round((end or time.time()) - t0, 3),
    "faults": len(faults), "notices": sum(e["kind"] == "notice" for e in events),
    "killed_after_notice": sum(e["kind"] == "killed_after_notice" for e in events),
    "kills": sum(e["kind"] == "kill" for e in events),
    "relaunches": sum(e["kind"] == "relaunch" for e in events),
    "restarts_seen": max(0, len(first_steps) - 1),
    "reforms": {c: sum(r["cause"] == c for r in reforms) for c in ("failure", "leave", "join")},
    "fault_to_step_s": dist(fault_to_step), "join_to_step_s": dist(join_to_step),
    "pause_s": pauses, "interval_s": interval, "notice_s": notice, "relaunch_delay_s": relaunch,
    "checkpoint_s": ckpt_s, "config": os.path.basename(config),
    "events": [dict(e, t=round(e["t"] - t0, 3)) for e in events],
    "reform_records": reforms,
    "trained_seconds": trained[-1]["seconds"] if trained else None,
    # The trainer's own split of the run's wall time (metrics/goodput.h): its last record.
    "accounting": {k: v for k, v in accounts[-1].items() if k not in ("type", "time")}
                  if accounts else None,
}
print(json.dumps(result))
PY
}

lines="$work/runs.jsonl"
: > "$lines"
echo "in_place_goodput.sh: started $(date -u +%FT%TZ); load average: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for ((rep = 0; rep < reps; rep++)); do
  order="$modes"
  if (( rep % 2 )); then order=$(echo "$modes" | tr ' ' '\n' | tac | tr '\n' ' '); fi
  for sc in $scenarios; do
    n="$steps"
    if [ "$sc" = A ] && [ -n "$steps_a" ]; then n="$steps_a"; fi
    if [ "$sc" = B ] && [ -n "$steps_b" ]; then n="$steps_b"; fi
    for mode in $order; do
      echo "in_place_goodput.sh: $sc $mode rep $rep ($n steps) at $(date -u +%T)" >&2
      driver "$sc" "$mode" "$rep" "$n" >> "$lines"
      tail -1 "$lines" | "$python" -c 'import json,sys; r=json.load(sys.stdin); print("  %.1f s, %d faults, last step %d%s" % (r["wall_s"], r["faults"], r["last_step"], "" if r["completed"] else ", NOT COMPLETED: " + r["reason"]))' >&2
      if [ -n "$logs" ]; then
        t="$sc-$mode-$rep"
        cp "$work/$t.log" "$logs/" 2>/dev/null || true
        cp "$work/$t/metrics.jsonl" "$logs/$t.metrics.jsonl" 2>/dev/null || true
        cp -r "$work/$t-logs" "$logs/" 2>/dev/null || true
      fi
    done
  done
done

# Goodput against the uninterrupted run of the same scenario and repetition; the table.
"$python" - "$lines" "$out" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import json, sys, time
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
base = {(r["scenario"], r["rep"]): r["wall_s"] for r in runs if r["mode"] == "none" and r["completed"]}
# The same figure from the trainer's accounting alone: the disrupted run's productive ratio over
# the uninterrupted run's (each = steps' time / wall time, the steps being the same work).
base_ratio = {(r["scenario"], r["rep"]): r["accounting"]["productive_ratio"] for r in runs
              if r["mode"] == "none" and r["completed"] and r.get("accounting")}
stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
with open(sys.argv[2], "a") as out:
    for r in runs:
        b = base.get((r["scenario"], r["rep"]))
        r["baseline_s"] = b
        r["goodput"] = round(b / r["wall_s"], 4) if b and r["completed"] else None
        a, br = r.get("accounting"), base_ratio.get((r["scenario"], r["rep"]))
        r["goodput_accounted"] = (round(a["productive_ratio"] / br, 4)
                                  if a and br and r["completed"] else None)
        r["measured_at"] = stamp
        out.write(json.dumps(r) + "\n")

def d(x):
    return "%.2f / %.2f / %.2f (%d)" % (x["min"], x["median"], x["max"], x["n"]) if x else "-"

names = {"A": "A notice", "B": "B SIGKILL"}
print("| scenario | recovery | rep | steps | wall s | goodput | faults | fault->step s min/med/max (n) "
      "| join->step s min/med/max (n) | pause s (failure, leave, join) min/med/max |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in runs:
    g = "%.1f%%" % (100 * r["goodput"]) if r["goodput"] else ("-" if r["mode"] == "none" else "n/a")
    p = "; ".join("%s %s" % (c, d(v)) for c, v in r["pause_s"].items()) or "-"
    print("| %s | %s | %d | %d%s | %.1f | %s | %d | %s | %s | %s |" % (
        names[r["scenario"]], r["mode"] if r["mode"] != "none" else "uninterrupted", r["rep"],
        r["last_step"], "" if r["completed"] else " (incomplete)", r["wall_s"], g, r["faults"],
        d(r["fault_to_step_s"]), d(r["join_to_step_s"]), p))
# Where the trainer's accounting put each run's wall time, against the wall clock.
print("\n| scenario | recovery | rep | wall s (clock) | wall s (accounted) | productive | restart s "
      "| redone s | reform s | startup s | goodput (clock) | goodput (accounted) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in runs:
    a = r.get("accounting")
    if not a:
        continue
    gc = "%.1f%%" % (100 * r["goodput"]) if r.get("goodput") else "-"
    ga = "%.1f%%" % (100 * r["goodput_accounted"]) if r.get("goodput_accounted") else "-"
    print("| %s | %s | %d | %.1f | %.1f | %.1f%% | %.1f | %.1f | %.1f | %.1f | %s | %s |" % (
        names[r["scenario"]], r["mode"] if r["mode"] != "none" else "uninterrupted", r["rep"],
        r["wall_s"], a["wall_s"], 100 * a["productive_ratio"], a["restart_s"], a["redone_s"],
        a["reform_s"], a["startup_s"], gc, ga))
print("\nload average at the end: %s; %s" % (sys.argv[3], stamp))
PY
