#!/usr/bin/env python3
"""The screenshot of docs/dashboard.png: a real job's live dashboard, taken by headless Chromium.

    bench/dashboard_screenshot.py [--out docs/dashboard.png] [--bin-dir build/bin]
        [--config configs/fashion_mnist_convnet.yaml] [--steps 1200] [--workers 3]

The job: cumulus-run --recovery in_place --metrics-port P with --workers workers of the config, a
checkpoint every 200 steps, an evaluation every 200; at 35% of the steps one worker is SIGKILLed
(the survivors re-form, a replacement joins), at 60% another. Near the end (90% of the steps) the
live page at http://127.0.0.1:P/ is captured at 1280x900. Prints the path and the step it showed.
"""
import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def workers_of(agent_pid):
    """The cumulus-train processes under the agent (each is its keeper's child)."""
    def children(pid):
        try:
            return [int(c) for t in os.listdir("/proc/%d/task" % pid)
                    for c in open("/proc/%d/task/%s/children" % (pid, t)).read().split()]
        except OSError:
            return []
    found = []
    for keeper in children(agent_pid):
        for w in children(keeper):
            try:
                if b"cumulus-train" in open("/proc/%d/cmdline" % w, "rb").read():
                    found.append(w)
            except OSError:
                pass
    return sorted(found)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "dashboard.png"))
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--config", default=os.path.join(ROOT, "configs", "fashion_mnist_convnet.yaml"))
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--workers", type=int, default=3)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="cumulus-dashboard-")
    port = free_port()
    cmd = [os.path.join(a.bin_dir, "cumulus-run"), "--standalone", "--nproc-per-node",
           str(a.workers), "--recovery", "in_place", "--metrics-port", str(port), "--run-id",
           "convnet-in-place", "--log-dir", os.path.join(tmp, "logs"), "--",
           os.path.join(a.bin_dir, "cumulus-train"), a.config,
           "--set", "trainer.max_steps=%d" % a.steps, "--set", "trainer.log_every_steps=20",
           "--set", "checkpoint.every_steps=200", "--set", "eval.every_steps=200",
           "--set", "trainer.run_dir=" + os.path.join(tmp, "run")]
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           start_new_session=True)
    kills = [int(a.steps * 0.35), int(a.steps * 0.6)]
    shot_at = int(a.steps * 0.9)
    step_re = re.compile(r"step (\d+)/%d" % a.steps)
    shown = None
    try:
        for line in job.stdout:
            m = step_re.search(line)
            if not m:
                continue
            step = int(m.group(1))
            if kills and step >= kills[0]:
                kills.pop(0)
                ws = workers_of(job.pid)
                if ws:
                    os.kill(ws[-1], signal.SIGKILL)
            if shown is None and step >= shot_at:
                shown = step
                subprocess.run(
                    ["timeout", "60", "chromium-headless-shell", "--headless", "--no-sandbox",
                     "--disable-gpu", "--no-first-run", "--hide-scrollbars",
                     "--user-data-dir=" + os.path.join(tmp, "chromium"),
                     "--virtual-time-budget=8000", "--window-size=1280,900",
                     "--screenshot=" + a.out, "http://127.0.0.1:%d/" % port],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        job.wait()
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
        subprocess.run(["rm", "-rf", tmp])
    if shown is None:
        sys.exit("dashboard_screenshot.py: the job ended (exit %s) before step %d" %
                 (job.returncode, shot_at))
    print("wrote %s: the live dashboard at step %d of %d" % (a.out, shown, a.steps))


if __name__ == "__main__":
    main()
