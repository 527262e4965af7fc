#!/usr/bin/env python3
"""Joins bench/diloco.sh's two phases into docs' tables (docs/diloco.md).

    bench/diloco_report.py [OUT_DIR] [--target-step 600] [--h MODE=H ...]

quality.jsonl: per mode its validation curve on loopback and rank 0's comm_bytes_sent.
links.jsonl:   per mode, rate and delay, the wall time per step (and the compute time per step
               and the time per sync).
Prints (and writes OUT_DIR/diloco.md):
  - quality: the validation loss at each evaluation, and against every-step's at the last one;
  - bytes: rank 0's bytes handed to the transport per 1000 steps, and every-step's over each;
  - time to target: the steps each mode needs to reach the validation loss every_step reaches
    after --target-step steps (linear between evaluations; "not reached" when its curve never
    gets there), times its time per step on each link; and the same to the highest final loss
    of any mode, which every mode reaches;
  - with OUT_DIR/tuning.jsonl (quality runs with --set keys, each line's "set" naming them): the
    final loss of each against every_step's;
  - with OUT_DIR/long/quality.jsonl (DiLoCo modes run for more steps, `bench/diloco.sh quality
    --steps 3000 --out-dir OUT_DIR/long`): the time to every_step's loss at --target-step on
    their longer schedules.
A mode's time per step on a link is the wall time per step of its run there (wall_ms_per_step:
compute, syncs and each step's boundary). Runs recorded before that field: its compute ms per step
+ the time of one sync x the syncs per step (every step, 1; DiLoCo, fragments / H, the time of one
sync being outer_wait_s / outer_rounds of that run), which leaves the step boundary out.
"""
import json
import math
import sys
from pathlib import Path

INNER_STEPS = {"diloco_h20": "20", "diloco_h50": "50", "streaming": "50 (4 fragments)"}
SYNCS_PER_STEP = {"every_step": 1.0, "every_step_bf16": 1.0, "diloco_h20": 1 / 20,
                  "diloco_h50": 1 / 50, "streaming": 4 / 50}


def ratio(x):
    """Two decimals, rounded down: a figure is never rounded up."""
    return "%.2fx" % (math.floor(x * 100) / 100)


def load(path):
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def steps_to(curve, target):
    """The first step where the curve reaches `target`, linear between evaluations."""
    prev = None
    for step, loss in curve:
        if loss <= target:
            if prev is None:
                return float(step)
            (s0, l0) = prev
            return s0 + (step - s0) * (l0 - target) / (l0 - loss)
        prev = (step, loss)
    return None


def per_step_ms(run):
    """The wall time of a step on that link; runs from before wall_ms_per_step was recorded: their
    compute plus the syncs spread over the steps (the step boundary left out)."""
    if run.get("wall_ms_per_step"):
        return run["wall_ms_per_step"]
    mode = run["mode"]
    if mode.startswith("every_step"):
        return run["compute_ms"] + run["comm_wait_ms"]
    sync_ms = 1000.0 * run["outer_wait_s"] / run["outer_rounds"] if run["outer_rounds"] else 0.0
    return run["compute_ms"] + sync_ms * SYNCS_PER_STEP[mode]


def main(argv):
    out = Path(argv[0]) if argv and not argv[0].startswith("--") else Path("bench/results/diloco")
    target_step = 600
    if "--target-step" in argv:
        target_step = int(argv[argv.index("--target-step") + 1])
    quality = {r["mode"]: r for r in load(out / "quality.jsonl")}  # the newest run of each mode
    links = load(out / "links.jsonl")
    lines = []
    if quality:
        modes = list(quality)
        steps = sorted({s for r in quality.values() for s, _ in r["evals"]})
        lines.append("Validation loss (nats per byte) on loopback, %s workers:\n"
                     % next(iter(quality.values())).get("workers", "?"))
        lines.append("| step | " + " | ".join(modes) + " |")
        lines.append("|---|" + "---|" * len(modes))
        for s in steps:
            row = [dict((a, b) for a, b in quality[m]["evals"]).get(s) for m in modes]
            lines.append("| %d | " % s + " | ".join("-" if v is None else "%.4f" % v for v in row) + " |")
        base = quality.get("every_step")
        lines.append("")
        lines.append("| mode | final loss | vs every_step | bytes sent per 1000 steps (rank 0) | "
                     "every_step's / this |")
        lines.append("|---|---|---|---|---|")
        for m in modes:
            r = quality[m]
            per_k = r["comm_bytes_sent"] * 1000.0 / r["steps"] if r.get("comm_bytes_sent") else None
            base_k = (base["comm_bytes_sent"] * 1000.0 / base["steps"]
                      if base and base.get("comm_bytes_sent") else None)
            rel = "%+.2f%%" % (100 * (r["test_loss"] / base["test_loss"] - 1)) if base else "-"
            times = ratio(base_k / per_k) if per_k and base_k else "-"
            lines.append("| %s | %.4f | %s | %s | %s |" % (
                m, r["test_loss"], rel, "-" if per_k is None else "{:,.0f}".format(per_k), times))
    if quality.get("every_step") and links:
        target = dict((a, b) for a, b in quality["every_step"]["evals"]).get(target_step)
        worst = max(r["test_loss"] for r in quality.values())
        lines.append("")
        if target is None:
            lines.append("every_step has no evaluation at step %d" % target_step)
        else:
            lines += time_table(quality, links, target,
                                "every_step's validation loss at step %d" % target_step)
        lines.append("")
        lines += time_table(quality, links, worst,
                            "the loss every mode reaches, the highest final loss")
    tuning = load(out / "tuning.jsonl")
    if quality.get("every_step") and tuning:
        lines.append("")
        lines += tuning_table(quality["every_step"], tuning)
    longer = {r["mode"]: r for r in load(out / "long" / "quality.jsonl")}
    if quality.get("every_step") and links and longer:
        target = dict((a, b) for a, b in quality["every_step"]["evals"]).get(target_step)
        if target is not None:
            lines.append("")
            lines += longer_table(quality, longer, links, target, target_step)
    text = "\n".join(lines) + "\n"
    (out / "diloco.md").write_text(text)
    print(text)


def runs_by_link(links):
    """{(rate, delay): {mode: its newest link run}}, in the order the links were run."""
    by_link = {}
    for r in links:
        by_link.setdefault((r["rate"], r["delay"]), {})[r["mode"]] = r
    return by_link


def time_table(quality, links, target, what):
    """Rows of the time to reach `target` on each link: the steps a mode needs (from its curve)
    times its time per step there."""
    lines = ["Wall time to reach %s (%.4f):\n" % (what, target),
             "| link | mode | steps to target | ms per step | time to target s | every_step's / this |",
             "|---|---|---|---|---|---|"]
    for (rate, delay), runs in runs_by_link(links).items():
        rows = []
        for m, r in runs.items():
            need = steps_to(quality[m]["evals"], target) if m in quality else None
            ms = per_step_ms(r)
            rows.append((m, need, ms, need * ms / 1000.0 if need is not None else None))
        base_s = next((secs for m, _, _, secs in rows if m == "every_step"), None)
        for m, need, ms, secs in rows:
            lines.append("| %s, %s | %s | %s | %.1f | %s | %s |" % (
                rate, delay, m, "not reached" if need is None else "%.0f" % need, ms,
                "-" if secs is None else "%.1f" % secs,
                ratio(base_s / secs) if base_s and secs else "-"))
    return lines

def tuning_table(base, tuning):
    """The settings tried (tuning.jsonl: a quality run each, its --set keys in "set"), against
    every_step's final loss at the same step count."""
    lines = ["Settings tried, validation loss after %d steps against every_step's %.4f:\n"
             % (base["steps"], base["test_loss"]),
             "| --modes | H | --set | final loss | vs every_step |", "|---|---|---|---|---|"]
    for r in tuning:
        if r["steps"] != base["steps"]:
            continue
        keys = r.get("set", [])
        h = next((kv.split("=", 1)[1] for kv in keys if kv.startswith("diloco.inner_steps=")),
                 INNER_STEPS.get(r["mode"], "-"))
        sets = ", ".join("`%s`" % kv for kv in keys if not kv.startswith("diloco.inner_steps="))
        if r.get("outer_lr_schedule"):
            sets += "; outer lr: " + r["outer_lr_schedule"]
        # Rounded up: a gap to the target is never shown smaller than it is.
        gap = math.ceil(10000 * (r["test_loss"] / base["test_loss"] - 1)) / 100
        lines.append("| %s | %s | %s | %.4f | %+.2f%% |" % (r["mode"], h, sets, r["test_loss"], gap))
    return lines


def longer_table(quality, longer, links, target, target_step):
    """The DiLoCo modes run for more steps (their own, longer, cosine schedule; OUT_DIR/long),
    against every_step's 1000-step run: the time to every_step's loss at --target-step."""
    lines = ["Wall time to reach every_step's validation loss at step %d (%.4f), DiLoCo modes on a "
             "longer schedule (long/quality.jsonl):\n" % (target_step, target),
             "| link | mode | schedule steps | steps to target | ms per step | time to target s | "
             "every_step's / this |",
             "|---|---|---|---|---|---|---|"]
    for (rate, delay), runs in runs_by_link(links).items():
        if "every_step" not in runs:
            continue
        base_s = target_step * per_step_ms(runs["every_step"]) / 1000.0
        every = [(m, r) for m, r in quality.items() if m.startswith("every_step")]
        for m, r in every + list(longer.items()):
            if m not in runs:
                continue
            need = steps_to(r["evals"], target)
            ms = per_step_ms(runs[m])
            secs = need * ms / 1000.0 if need is not None else None
            lines.append("| %s, %s | %s | %d | %s | %.1f | %s | %s |" % (
                rate, delay, m, r["steps"], "not reached" if need is None else "%.0f" % need, ms,
                "-" if secs is None else "%.1f" % secs, ratio(base_s / secs) if secs else "-"))
    return lines


if __name__ == "__main__":
    main(sys.argv[1:])
