#!/bin/bash
# Straggler-aware batch shares (`trainer.balance`, docs/mixed_fleets.md), measured side by side in
# one run: 2 convnet workers on one host under cumulus-run, rank 0 pinned to core 0 and rank 1 (all
# its threads, `taskset -a`) to core 1, which it shares with --hogs busy loops (`yes`, pinned there
# too), so rank 1 computes at a fraction of rank 0's speed. Each scenario runs once with
# trainer.balance=off and once with auto, back to back (the order alternates by repetition).
#
#   bench/balance.sh [--ddp] [--scenarios "static onoff"] [--reps 1] [--steps 400] [--hogs 1]
#       [--every 20] [--on-step 100] [--off-step 250] [--config configs/fashion_mnist_convnet.yaml]
#       [--set KEY=VALUE]... [--bin-dir build/bin] [--out FILE] [--logs DIR] [--timeout 1800]
#
# --ddp: static also runs PyTorch DDP (bench/ddp_train.py, Gloo, its own launcher) under the same
#         throttle and pinning: the peer's figure on a mixed fleet. Its samples/s is its own
#         summary's (steps after its first 10, whose warm-up it leaves out; Cumulus's figure
#         keeps every step, so the comparison does not favour Cumulus).
# static: the busy loops run for the whole job.
# onoff:  they start once rank 0 has logged step --on-step and stop at step --off-step (the
#         steps are those of the train records, logged every 10 steps, so the switch lands up to
#         10 steps after; the step seen is reported).
# Both: trainer.max_steps=--steps, trainer.threads=1 (one core per worker), balance_every_steps
# --every, a fresh run directory each. What it reports per run (one JSON line to --out, default
# bench/results/balance.jsonl, and a markdown table on stdout):
#   samples_per_s   global samples / the loop's seconds (the "trained" record)
#   steady          samples/s over the last two thirds of the steps (train records), after
#                   the shares settled: what a long job sees
#   ratio           auto / off of the same scenario and repetition
#   rates           auto: the compute rates (samples/s, rank 0 / rank 1) of the first change
#                   (onoff: the first after the throttle began), measured with the shares before
#                   it (static: equal, i.e. under the same throttle as off)
#   ideal           the ratio those rates imply: equal shares take B/2/r1, proportional ones
#                   B/(r0+r1), so (r0+r1)/(2·r1) (1.5x at half speed, 2x at a third)
#   shares          every change: step:shares (onoff: also the steps the throttle switched)
#   adapt           onoff: steps from the throttle's start (and stop) to the next change of shares
# The throttle's effect is measured, not assumed: the scheduler's autogroups decide how much of
# core 1 rank 1 gets against the busy loops (they run in this script's session).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
python=${CUMULUS_PYTHON:-$root/.venv/bin/python}  # the project environment, with torch
ddp=0; scenarios="static onoff"; reps=1; steps=400; hogs=1; every=20; on_step=100; off_step=250
config="$root/configs/fashion_mnist_convnet.yaml"; bin_dir="$root/build/bin"
out="$here/results/balance.jsonl"; sets=(); logs=""; timeout=1800
while [ $# -gt 0 ]; do
  case "$1" in
    --ddp) ddp=1; shift ;;
    --scenarios) scenarios="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --hogs) hogs="$2"; shift 2 ;;
    --every) every="$2"; shift 2 ;;
    --on-step) on_step="$2"; shift 2 ;;
    --off-step) off_step="$2"; shift 2 ;;
    --config) config="$2"; shift 2 ;;
    --set) sets+=("$2"); shift 2 ;;
    --bin-dir) bin_dir="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --logs) logs="$2"; shift 2 ;;
    --timeout) timeout="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "balance.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
for b in cumulus-run cumulus-train; do
  [ -x "$bin_dir/$b" ] || { echo "balance.sh: $bin_dir/$b is missing; build it first" >&2; exit 2; }
done
for t in taskset yes; do
  command -v "$t" >/dev/null || { echo "balance.sh: $t is missing (util-linux, coreutils)" >&2; exit 2; }
done
[ "$(nproc)" -ge 2 ] || { echo "balance.sh: needs at least 2 cores" >&2; exit 2; }
[ -f "$config" ] || { echo "balance.sh: no config $config" >&2; exit 2; }
work="$(mktemp -d /tmp/cumulus-balance.XXXXXX)"
trap 'rm -rf "$work"' EXIT
if [ -n "$logs" ]; then mkdir -p "$logs"; fi
mkdir -p "$(dirname "$out")"
set_json=$("$python" -c 'import json,sys; print(json.dumps(sys.argv[1:]))' "${sets[@]+"${sets[@]}"}")

"$python" - "$scenarios" "$reps" "$steps" "$hogs" "$every" "$on_step" "$off_step" \
  "$config" "$bin_dir" "$work" "$out" "$logs" "$timeout" "$set_json" "$ddp" "$root" <<'PY'
import json, os, shutil, subprocess, sys, time

(scenarios, reps, steps, hogs, every, on_step, off_step, config, bin_dir, work, out, logs,
 timeout, set_json, ddp, root) = sys.argv[1:]
ddp = ddp == "1"
reps, steps, hogs, every = int(reps), int(steps), int(hogs), int(every)
on_step, off_step, timeout = int(on_step), int(off_step), float(timeout)

def records(path):
    try:
        with open(path) as f:
            return [json.loads(l) for l in f if l.strip().startswith("{")]
    except (OSError, ValueError):
        return []

def last_step(path):
    steps_seen = [r["step"] for r in records(path) if r.get("type") == "train"]
    return max(steps_seen) if steps_seen else 0

def children(pid):
    try:
        return subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    except OSError:
        return []

def workers(agent):
    """{rank: pid} of the agent's cumulus-train workers (RANK from their environment); each is
    the child of its keeper, the agent's child."""
    found = {}
    for pid in [w for keeper in children(agent.pid) for w in children(keeper)]:
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            found[int(env[b"RANK"])] = int(pid)
        except (OSError, KeyError, ValueError):
            pass
    return found

def start_hogs():
    return [subprocess.Popen(["taskset", "-c", "1", "yes"], stdout=subprocess.DEVNULL)
            for _ in range(hogs)]

def stop_hogs(procs):
    for p in procs:
        p.kill()
        p.wait()

def run(scenario, mode, rep):
    tag = "%s-%s-%d" % (scenario, mode, rep)
    run_dir = os.path.join(work, tag)
    train = [os.path.join(bin_dir, "cumulus-train"), config,
             "--set", "trainer.max_steps=%d" % steps, "--set", "trainer.epochs=1000000",
             "--set", "trainer.threads=1", "--set", "trainer.log_every_steps=10",
             "--set", "trainer.balance=" + mode, "--set", "trainer.balance_every_steps=%d" % every,
             "--set", "checkpoint.every_steps=0", "--set", "trainer.run_dir=" + run_dir]
    for kv in json.loads(set_json):
        train += ["--set", kv]
    log_path = os.path.join(work, tag + ".log")
    log = open(log_path, "w")
    hog_procs = start_hogs() if scenario == "static" else []
    if mode == "ddp":
        # The peer: the same experiment, steps and threads; its own launcher starts the 2 ranks.
        cmd = [sys.executable, os.path.join(root, "bench", "ddp_train.py"), config,
               "--set", "trainer.max_steps=%d" % steps, "--set", "trainer.epochs=1000000",
               "--set", "trainer.threads=1", "--nproc", "2"]
        for kv in json.loads(set_json):
            cmd += ["--set", kv]
        summary_path = os.path.join(work, tag + ".summary")
        agent = subprocess.Popen(cmd, stdout=open(summary_path, "w"), stderr=log)
    else:
        agent = subprocess.Popen([os.path.join(bin_dir, "cumulus-run"), "--standalone",
                                  "--nproc-per-node=2", "--"] + train,
                                 stdout=log, stderr=subprocess.STDOUT,
                                 env=dict(os.environ, CUMULUS_RUN_ID=""))
    metrics = os.path.join(run_dir, "metrics.jsonl")
    pinned, switched, deadline = False, {}, time.time() + timeout
    try:
        while agent.poll() is None:
            if time.time() > deadline:
                agent.kill()
                raise SystemExit("balance.sh: %s ran past --timeout" % tag)
            if not pinned:
                pids = workers(agent)
                if len(pids) == 2:
                    for rank, core in ((0, "0"), (1, "1")):
                        subprocess.run(["taskset", "-a", "-p", "-c", core, str(pids[rank])],
                                       check=True, stdout=subprocess.DEVNULL)
                    pinned = True
            if scenario == "onoff" and pinned:
                seen = last_step(metrics)
                if "on" not in switched and seen >= on_step:
                    hog_procs = start_hogs()
                    switched["on"] = seen
                elif "on" in switched and "off" not in switched and seen >= off_step:
                    stop_hogs(hog_procs)
                    hog_procs = []
                    switched["off"] = seen
            time.sleep(0.05)
    finally:
        stop_hogs(hog_procs)
        log.close()
    if agent.returncode != 0:
        raise SystemExit("balance.sh: %s exited %d; see %s" % (tag, agent.returncode, log_path))
    if mode == "ddp":
        summary = [r for r in records(summary_path) if r.get("type") == "summary"][-1]
        if logs:
            shutil.copy(log_path, os.path.join(logs, tag + ".log"))
        return {"scenario": scenario, "mode": mode, "rep": rep, "steps": summary["steps"],
                "samples_per_s": summary["samples_per_sec"], "pinned": pinned, "hogs": hogs,
                "test_accuracy": summary["test_accuracy"]}
    recs = records(metrics)
    trained = [r for r in recs if r.get("type") == "trained"][-1]
    batch = next(r["samples_per_sec"] * r["step_time_ms"] / 1000 for r in recs
                 if r.get("type") == "train")  # the global batch of one step
    changes = [r for r in recs if r.get("type") == "balance" and r.get("reason") == "auto"]
    # Steady state: the train records of the last two thirds of the run (static: after the
    # shares settled), each window's samples/s weighted by its steps.
    train_recs = [r for r in recs if r.get("type") == "train"]
    late, prev, n, secs = steps // 3, None, 0, 0.0
    for r in train_recs:
        if prev is not None and prev >= late:
            n += r["step"] - prev
            secs += (r["step"] - prev) * r["step_time_ms"] / 1000
        prev = r["step"]
    row = {"scenario": scenario, "mode": mode, "rep": rep, "steps": trained["steps"],
           "seconds": trained["seconds"],
           "samples_per_s": trained["steps"] * round(batch) / trained["seconds"],
           "steady_samples_per_s": n * round(batch) / secs if secs else None,
           "pinned": pinned, "hogs": hogs, "every": every,
           "changes": [{"step": r["step"], "shares": r["shares"], "rates": r["rates"],
                        "predicted_speedup": r["predicted_speedup"]} for r in changes]}
    # The rates under the throttle: the first change (static), the first after it began (onoff).
    throttled = [c for c in changes if c["step"] >= switched.get("on", 0)]
    if throttled:
        r0, r1 = throttled[0]["rates"]
        row["rates"] = [r0, r1]
        row["ideal"] = (r0 + r1) / (2 * min(r0, r1))
    if switched:
        row["switched"] = switched
        adapt = {}
        for edge, at in switched.items():
            after = [c["step"] for c in changes if c["step"] >= at]
            adapt[edge] = after[0] - at if after else None
        row["adapt_steps"] = adapt
    if logs:
        shutil.copy(log_path, os.path.join(logs, tag + ".log"))
        shutil.copy(metrics, os.path.join(logs, tag + ".metrics.jsonl"))
    return row

rows = []
with open(out, "a") as sink:
    for rep in range(reps):
        for scenario in scenarios.split():
            modes = ["off", "auto"] if rep % 2 == 0 else ["auto", "off"]
            if ddp and scenario == "static":
                modes.append("ddp")
            for mode in modes:
                row = run(scenario, mode, rep)
                rows.append(row)
                sink.write(json.dumps(row) + "\n")
                sink.flush()
                print("%s %s rep %d: %.1f samples/s" % (scenario, mode, rep, row["samples_per_s"]),
                      file=sys.stderr)

print("| scenario | rep | off samples/s | auto samples/s | auto/off | steady off / auto | steady auto/off "
      "| rates r0/r1 (samples/s) | ideal | shares (step:shares) | throttle on/off at step "
      "| adapted after (steps) | DDP samples/s | auto/DDP (whole, steady) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for scenario in scenarios.split():
    for rep in range(reps):
        off = next(r for r in rows if r["scenario"] == scenario and r["rep"] == rep
                   and r["mode"] == "off")
        auto = next(r for r in rows if r["scenario"] == scenario and r["rep"] == rep
                    and r["mode"] == "auto")
        rates = "%.0f / %.0f" % tuple(auto["rates"]) if "rates" in auto else "no change"
        ideal = "%.2fx" % auto["ideal"] if "ideal" in auto else "-"
        shares = ", ".join("%d:%s" % (c["step"], "/".join(map(str, c["shares"])))
                           for c in auto["changes"]) or "equal"
        sw = auto.get("switched", {})
        on_off = "%s / %s" % (sw.get("on", "-"), sw.get("off", "-")) if sw else "whole run"
        ad = auto.get("adapt_steps", {})
        adapted = "%s / %s" % (ad.get("on"), ad.get("off")) if ad else "-"
        peer = next((r for r in rows if r["scenario"] == scenario and r["rep"] == rep
                     and r["mode"] == "ddp"), None)
        vs_ddp = ("%.1f | %.2fx, %.2fx" % (peer["samples_per_s"], auto["samples_per_s"] / peer["samples_per_s"],
                                             auto["steady_samples_per_s"] / peer["samples_per_s"])
                  if peer else "- | -")
        print("| %s | %d | %.1f | %.1f | %.2fx | %.1f / %.1f | %.2fx | %s | %s | %s | %s | %s | %s |" % (
            scenario, rep, off["samples_per_s"], auto["samples_per_s"],
            auto["samples_per_s"] / off["samples_per_s"], off["steady_samples_per_s"],
            auto["steady_samples_per_s"], auto["steady_samples_per_s"] / off["steady_samples_per_s"],
            rates, ideal, shares, on_off, adapted, vs_ddp))
PY
