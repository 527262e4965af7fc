#!/usr/bin/env python3
"""A training loop of one's own, watched as its user watches it: under cumulus-run
--metrics-port, while it trains, its step and goodput at /metrics and its loss drawn by the live
dashboard in headless Chromium; then a SIGTERM stops it (exit 75), and TensorBoard's own reader
and cumulus-report's page, drawn by Chromium, find its train records.

    watch_loop.py --bin DIR --run-dir RUN_DIR [--workers 3] [--after 100] [--log-every N]
        -- PROGRAM ARGS...

PROGRAM (a loop on cumulus::Elastic or cumulus.Elastic with a Recorder writing RUN_DIR) must
print "[rank0] step S/..." lines and keep training past step --after; cumulus-run and
cumulus-report come from --bin. Prints "watch_loop: ok ..." and exits 0 when every check holds;
otherwise one line per failed check and exit 1. Loopback only; the job's process group is
killed on the way out.
"""
import argparse
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dashboard_check import render_dom  # noqa: E402

PROGRESS = re.compile(r"\[rank0\] step (\d+)/")


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape_until(port, ready, deadline_s=60):
    """cumulus-run's /metrics as {series: value} once ready(series) holds (polled every 0.2 s up
    to the deadline); the last scrape otherwise."""
    end = time.monotonic() + deadline_s
    series = {}
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                text = r.read().decode()
            series = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
                      for line in text.splitlines() if line and not line.startswith("#")}
        except OSError:
            pass
        if ready(series) or time.monotonic() >= end:
            return series
        time.sleep(0.2)


def train_points(dom):
    return len(dom.select("loss-plot", "circle", ("pt", "train")))


def run_job(command, env=None, on_line=None, timeout=240):
    """Runs `command` (cumulus-run and its workers) in a session of its own, giving
    on_line(line, process, output so far) each line of its output; its process group is SIGKILLed
    after `timeout` seconds and on the way out. Returns (exit code, output)."""
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    timer = threading.Timer(timeout, lambda: os.killpg(process.pid, signal.SIGKILL))
    timer.start()
    lines = []
    try:
        for line in process.stdout:
            lines.append(line)
            if on_line:
                on_line(line.rstrip("\n"), process, "".join(lines))
        process.wait()
    finally:
        timer.cancel()
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        process.stdout.close()
    return process.returncode, "".join(lines)


def watch_live(args, port, scratch):
    """Runs the job until --after, checks it live, stops it; (exit code, output, live facts)."""
    command = [os.path.join(args.bin, "cumulus-run"), "--standalone", "--nproc-per-node",
               str(args.workers), "--metrics-port", str(port), "--", *args.program]
    live = {}

    def on_line(line, process, output):
        m = PROGRESS.match(line)
        if live or m is None or int(m[1]) < args.after:
            return
        live["metrics"] = scrape_until(port, lambda s: s.get("cumulus_step", 0) >= args.after)
        live["dom"] = render_dom(f"http://127.0.0.1:{port}/", os.path.join(scratch, "live"))
        process.send_signal(signal.SIGTERM)  # cumulus-run forwards it: a preemption

    code, output = run_job(command, on_line=on_line, timeout=args.timeout)
    return code, output, live


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin", required=True, help="where cumulus-run and cumulus-report are")
    parser.add_argument("--run-dir", required=True, help="the loop's run directory")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--after", type=int, default=100, help="steps before the live checks")
    parser.add_argument("--log-every", type=int, default=20, help="the loop's train records")
    parser.add_argument("--timeout", type=float, default=240)
    parser.add_argument("program", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.program[:1] == ["--"]:
        args.program = args.program[1:]
    if not args.program:
        parser.error("no PROGRAM after --")
    failures = []

    def check(ok, what):
        if not ok:
            failures.append(what)

    with tempfile.TemporaryDirectory() as scratch:
        code, output, live = watch_live(args, free_port(), scratch)
        check("dom" in live, "the loop never reported step %d" % args.after)
        check(code == 75, "cumulus-run exited %d after the SIGTERM, not 75" % code)
        metrics = live.get("metrics", {})
        check(metrics.get("cumulus_step", 0) >= args.after,
              "/metrics: cumulus_step %s, expected >= %d" % (metrics.get("cumulus_step"),
                                                            args.after))
        training = metrics.get('cumulus_goodput_seconds_total{category="training"}', 0)
        check(training > 0, "/metrics: no training time in the goodput split")
        if "dom" in live:
            dom = live["dom"]
            check(dom.body()["attrs"].get("data-ready") == "1", "live page: not data-ready")
            drawn = train_points(dom)
            check(drawn >= 1 + args.after // args.log_every,
                  "live page: %d train points, expected >= %d" % (
                      drawn, 1 + args.after // args.log_every))
            bars = len(dom.select("rank-rates", cls=("bar",)))
            check(bars == args.workers, "live page: %d rank bars, expected %d" % (bars,
                                                                             args.workers))
            segments = [s["attrs"].get("data-category")
                        for s in dom.select("goodput", cls=("segment",))]
            check("training" in segments, "live page: goodput segments %r" % segments)

        with open(os.path.join(args.run_dir, "metrics.jsonl")) as f:
            records = [json.loads(line) for line in f]
        trains = [r["step"] for r in records if r["type"] == "train"
                  and isinstance(r.get("loss"), (int, float)) and math.isfinite(r["loss"])]
        check(len(trains) >= 1 + args.after // args.log_every,
              "metrics.jsonl: %d train records with a loss" % len(trains))
        check([r["type"] for r in records if r["type"] == "preempted"] == ["preempted"],
              "metrics.jsonl: not one preempted record")
        # TensorBoard's own reader, from the same environment's tensorboard package.
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        tensorboard = EventAccumulator(os.path.join(args.run_dir, "tensorboard"))
        tensorboard.Reload()
        tags = tensorboard.Tags().get("scalars", [])
        losses = [e.step for e in tensorboard.Scalars("train/loss")] if "train/loss" in tags \
            else []
        check(losses == trains, "TensorBoard: train/loss at steps %s, the records at %s" % (
            losses, trains))
        check("goodput/training_s" in tags, "TensorBoard: no goodput/training_s in %s" % tags)
        # cumulus-report's page of the finished run, drawn.
        report = subprocess.run([os.path.join(args.bin, "cumulus-report"), args.run_dir],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                timeout=120)
        check(report.returncode == 0, "cumulus-report: %s" % report.stdout.strip())
        if report.returncode == 0:
            page = render_dom("file://" + os.path.join(args.run_dir, "report.html"),
                              os.path.join(scratch, "report"))
            check(train_points(page) == len(trains), "report: %d train points, %d records" % (
                train_points(page), len(trains)))
    if failures:
        print(output[-4000:], file=sys.stderr)
        for f in failures:
            print("watch_loop: " + f)
        return 1
    print("watch_loop: ok: step %d live, %d train points live, %d train records, TensorBoard and "
          "the report agree" % (metrics.get("cumulus_step", 0), drawn, len(trains)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
