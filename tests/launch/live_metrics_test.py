#!/usr/bin/env python3
"""End-to-end: a live job's metrics through the real Prometheus and the real headless Chromium.

One TestCase, one long test (the phases share one job, so they run in order in one method):
  1. cumulus-run --standalone --nproc-per-node 2 --metrics-port P --recovery in_place, two
     cumulus-train workers on configs/smoke.yaml made long (stopped by this test);
  2. Debian's prometheus scraping 127.0.0.1:P every second (its own loopback port Q);
  3. through Prometheus's query API: cumulus_step > 0 and increasing, the goodput ratio in (0, 1],
     the goodput categories summing to the wall time (5 %), world size 2, up == 1;
  4. malformed traffic while training: 50 connections held at once, garbage on some, one request
     with a 64 KiB header; each gets a 4xx or is closed, a fresh GET /metrics still answers 200
     (latency printed), and training goes on;
  5. SIGKILL of the rank-1 worker ($CUMULUS_KILL_RANK to choose another): Prometheus shows a
     failure of cause "signal SIGKILL", a re-forming and the replacement's join, the world is 2
     again and the step increases;
  6. Chromium on the live dashboard: data-ready, train points, one bar per rank, failure and
     reform/join events on the timeline, a training goodput segment; a PNG screenshot
     ($CUMULUS_SCREENSHOT, else in the temp dir);
  7. SIGTERM to cumulus-run: a preemption, exit code 75;
  8. cumulus-report RUN_DIR in Chromium: train/eval points == the records of metrics.jsonl;
  9. the TensorBoard events files: brain.Event:2 first, train/loss steps == the train records'.

Environment: CUMULUS_BIN (default <repo>/build/bin), CUMULUS_SCREENSHOT (optional),
CUMULUS_KILL_RANK (default 1), CUMULUS_KEEP_TMP=1 (keep the temp dir and say where),
PROMETHEUS (default /usr/bin/prometheus), CHROMIUM (default chromium-headless-shell on PATH).
Skipped (not failed) when Prometheus or Chromium is missing.
Standard library only; loopback only; every process group and temp dir is removed, also on failure.
Usage: .venv/bin/python tests/launch/live_metrics_test.py [-v]
"""
import importlib.metadata
import json
import math
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BIN = os.environ.get("CUMULUS_BIN") or os.path.join(ROOT, "build", "bin")
PROMETHEUS = os.environ.get("PROMETHEUS", "/usr/bin/prometheus")
READ_TFEVENTS = os.path.join(ROOT, "tests", "metrics", "read_tfevents.py")
PY = sys.executable
JOB = "cumulus"

sys.path.insert(0, HERE)
from dashboard_check import Dom, find_chromium, finite  # noqa: E402  (the dashboard test's helpers)


_libc = None


def _die_with_parent():
    """preexec_fn: SIGKILL when this test dies (even by SIGKILL, as at a ctest timeout)."""
    global _libc
    import ctypes
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    _libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(path, n=40):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError as e:
        return "(cannot read %s: %s)" % (path, e)


def descendants(pid):
    """Every live process below pid (from /proc)."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                stat = f.read()
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        except (OSError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def proc_comm(pid):
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return None


def proc_env(pid):
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    env = {}
    for item in raw.split(b"\0"):
        if b"=" in item:
            k, v = item.split(b"=", 1)
            env[k.decode(errors="replace")] = v.decode(errors="replace")
    return env


def wait_for(what, probe, deadline_s, interval_s=0.2, on_fail=None):
    """Polls probe() -> (done, last_value) until done or the deadline; fails naming what and the
    last value seen. Returns the last value."""
    end = time.monotonic() + deadline_s
    last, error = None, None
    while True:
        try:
            done, last = probe()
            error = None
            if done:
                return last
        except AssertionError:
            raise
        except Exception as e:  # noqa: BLE001 -- a probe error is reported if it persists
            error = "%s: %s" % (type(e).__name__, e)
        if time.monotonic() >= end:
            msg = "timed out after %.0f s waiting for %s; last value seen: %r" % (deadline_s, what, last)
            if error:
                msg += "; last error: %s" % error
            if on_fail:
                msg += "\n" + on_fail()
            raise AssertionError(msg)
        time.sleep(interval_s)


def http_get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read()


def read_http_answer(sock, deadline_s):
    """The status code of the answer on sock, or "closed" when the server closed it without one
    (EOF or reset), or None at the deadline."""
    sock.settimeout(0.2)
    end = time.monotonic() + deadline_s
    data = b""
    while time.monotonic() < end:
        try:
            chunk = sock.recv(4096)
        except socket.timeout:
            continue
        except OSError:
            return "closed" if not data else _status(data)
        if not chunk:
            return "closed" if not data else _status(data)
        data += chunk
        if b"\r\n" in data:
            return _status(data)
    return None


def _status(data):
    line = data.split(b"\r\n", 1)[0].decode(errors="replace")
    parts = line.split()
    if len(parts) >= 2 and parts[0].startswith("HTTP/") and parts[1].isdigit():
        return int(parts[1])
    return "garbage answer %r" % line[:80]


class LiveMetrics(unittest.TestCase):
    def setUp(self):
        for name in ("cumulus-run", "cumulus-train", "cumulus-report"):
            path = os.path.join(BIN, name)
            # The binaries may be rebuilt under us now and then: wait a little for one to reappear.
            wait_for("%s to exist and be executable" % path,
                     lambda p=path: (os.access(p, os.X_OK), os.path.exists(p)), 30, 0.5)
        # Both come with scripts/install-deps.sh (make test runs it): missing is a failure, not a
        # skip, so that a CI machine without them cannot pass untested.
        if not os.access(PROMETHEUS, os.X_OK):
            self.fail("no Prometheus at %s: run scripts/install-deps.sh (Debian's prometheus)"
                      % PROMETHEUS)
        self.chromium = find_chromium()
        if not self.chromium:
            self.fail("no Chromium: run scripts/install-deps.sh (chromium-headless-shell) or set "
                      "CHROMIUM")
        self.tmp = tempfile.mkdtemp(prefix="live_metrics_test.")
        if os.environ.get("CUMULUS_KEEP_TMP"):
            print("live_metrics_test: keeping %s" % self.tmp, file=sys.stderr)
        else:
            self.addCleanup(shutil.rmtree, self.tmp, True)
        self.summary = []

    # -- processes ------------------------------------------------------------------------------

    def start(self, name, argv, env=None):
        """Starts argv in its own process group, output to TMP/NAME.log; killed (the whole group)
        at cleanup."""
        log_path = os.path.join(self.tmp, name + ".log")
        log = open(log_path, "wb")
        self.addCleanup(log.close)
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                cwd=self.tmp, env=env, start_new_session=True, preexec_fn=_die_with_parent)
        self.addCleanup(self.kill_group, proc)
        return proc, log_path

    @staticmethod
    def kill_group(proc):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass

    def job_tail(self):
        return "--- tail of the job log %s ---\n%s" % (self.job_log, tail(self.job_log))

    def check_job_alive(self):
        rc = self.job.poll()
        if rc is not None:
            self.fail("cumulus-run exited early with %d\n%s" % (rc, self.job_tail()))
        prom = getattr(self, "prom", None)
        if prom is not None and prom.poll() is not None:
            self.fail("prometheus exited early with %d\n%s" % (prom.returncode, tail(self.prom_log)))

    def browse(self, name, *args, budget_ms=5000):
        profile = tempfile.mkdtemp(prefix="profile.", dir=self.tmp)
        argv = ["timeout", "60", self.chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--hide-scrollbars", "--user-data-dir=" + profile, "--virtual-time-budget=%d" % budget_ms] + list(args)
        err_path = os.path.join(self.tmp, name + ".chromium.log")
        with open(err_path, "wb") as err:
            r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL,
                               start_new_session=True, preexec_fn=_die_with_parent, timeout=90)
        if r.returncode:
            self.fail("chromium (%s) exited with %d%s\n%s" % (name, r.returncode,
                      " (ran past 60 s)" if r.returncode == 124 else "", tail(err_path, 20)))
        return r.stdout.decode("utf-8", errors="replace")

    # -- Prometheus -----------------------------------------------------------------------------

    def query(self, expr):
        """[(labels, value)] of an instant query."""
        url = "http://127.0.0.1:%d/api/v1/query?%s" % (self.prom_port, urllib.parse.urlencode({"query": expr}))
        _, body = http_get(url)
        answer = json.loads(body)
        if answer.get("status") != "success":
            raise RuntimeError("query %s: %s" % (expr, answer))
        return [(r["metric"], float(r["value"][1])) for r in answer["data"]["result"]]

    def scalar(self, expr):
        """The one value of expr, or None while there is none."""
        result = self.query(expr)
        if not result:
            return None
        if len(result) != 1:
            raise AssertionError("query %s gave %d series, expected 1: %r" % (expr, len(result), result))
        return result[0][1]

    def wait_value(self, what, expr, ok, deadline_s=30):
        def probe():
            self.check_job_alive()
            v = self.scalar(expr)
            return v is not None and ok(v), v
        return wait_for("%s (Prometheus: %s)" % (what, expr), probe, deadline_s, 0.25, self.job_tail)

    def wait_step_increase(self, what, deadline_s=30):
        first = self.wait_value("cumulus_step > 0 " + what, "cumulus_step", lambda v: v > 0, deadline_s)
        later = self.wait_value("cumulus_step to pass %g %s" % (first, what), "cumulus_step", lambda v: v > first,
                                deadline_s)
        self.summary.append("step %s: %g -> %g" % (what, first, later))
        return later

    # -- the test -------------------------------------------------------------------------------

    def prometheus_client_reads(self, port):
        """The same exposition through the Python ecosystem's parser (prometheus_client's), which
        raises on any line it cannot read: the families' types, and samples whose values agree."""
        status, body = http_get("http://127.0.0.1:%d/metrics" % port, timeout=30)
        self.assertEqual(status, 200)
        families = list(text_string_to_metric_families(body.decode()))
        types = {f.name: f.type for f in families}
        samples = {}
        for family in families:
            for sample in family.samples:
                samples.setdefault(sample.name, []).append(sample)
        self.assertEqual(types["cumulus_world_size"], "gauge")
        self.assertEqual([s.value for s in samples["cumulus_world_size"]], [2.0])
        self.assertEqual(types["cumulus_goodput_seconds"], "counter")  # the parser drops _total
        categories = {s.labels["category"]: s.value for s in samples["cumulus_goodput_seconds_total"]}
        self.assertGreater(len(categories), 1, categories)
        self.assertTrue(all(v >= 0 for v in categories.values()), categories)
        wall = samples["cumulus_wall_seconds_total"][0].value
        self.assertLessEqual(abs(sum(categories.values()) / wall - 1), 0.05, (categories, wall))
        self.assertGreaterEqual(samples["cumulus_step"][0].value, 1)
        self.summary.append("prometheus_client %s parsed %d families, %d samples" % (
            importlib.metadata.version("prometheus-client"),
            len(families), sum(len(v) for v in samples.values())))

    def test_live_job_through_prometheus_and_chromium(self):
        t0 = time.monotonic()
        port, self.prom_port = free_port(), free_port()
        while self.prom_port == port:
            self.prom_port = free_port()
        run_dir = os.path.join(self.tmp, "run")
        env = dict(os.environ, OMP_NUM_THREADS="1")

        # 1. The job.
        argv = [os.path.join(BIN, "cumulus-run"), "--standalone", "--nproc-per-node", "2", "--metrics-port", str(port),
                "--recovery", "in_place", "--log-dir", os.path.join(self.tmp, "logs"), "--",
                os.path.join(BIN, "cumulus-train"), os.path.join(ROOT, "configs", "smoke.yaml"),
                "--set", "trainer.epochs=100000", "--set", "trainer.max_steps=100000000",
                "--set", "data.synthetic_train_samples=4096", "--set", "trainer.log_every_steps=20",
                "--set", "checkpoint.every_steps=200", "--set", "eval.every_steps=200",
                "--set", "trainer.run_dir=" + run_dir]
        self.job, self.job_log = self.start("job", argv, env)
        want_line = ("live metrics: http://127.0.0.1:%d/ (dashboard), http://127.0.0.1:%d/metrics (Prometheus)"
                     % (port, port))

        def line_printed():
            self.check_job_alive()
            return want_line in tail(self.job_log, 1000), None
        wait_for("the job to print %r" % want_line, line_printed, 30, 0.1, self.job_tail)

        # 2. Prometheus.
        prom_dir = os.path.join(self.tmp, "prometheus")
        os.makedirs(prom_dir)
        prom_yml = os.path.join(prom_dir, "prometheus.yml")
        with open(prom_yml, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: %s\n    scrape_interval: 1s\n    scrape_timeout: 1s\n"
                    "    static_configs:\n      - targets: ['127.0.0.1:%d']\n" % (JOB, port))
        self.prom, self.prom_log = self.start("prometheus", [
            PROMETHEUS, "--config.file=" + prom_yml, "--storage.tsdb.path=" + os.path.join(prom_dir, "data"),
            "--web.listen-address=127.0.0.1:%d" % self.prom_port], env)

        def prom_ready():
            if self.prom.poll() is not None:
                raise AssertionError("prometheus exited with %d\n%s" % (self.prom.returncode, tail(self.prom_log)))
            try:
                status, _ = http_get("http://127.0.0.1:%d/-/ready" % self.prom_port, timeout=2)
                return status == 200, status
            except OSError as e:
                return False, str(e)
        wait_for("Prometheus to answer /-/ready", prom_ready, 60, 0.2, lambda: tail(self.prom_log))

        # 3. The job through Prometheus.
        self.wait_value("the target to be up", 'up{job="%s"}' % JOB, lambda v: v == 1)
        self.wait_step_increase("at start")
        ratio = self.wait_value("the goodput ratio in (0, 1]", "cumulus_goodput_ratio", lambda v: 0 < v <= 1)
        rel = self.wait_value("the goodput categories to sum to the wall time within 5%",
                              "sum(cumulus_goodput_seconds_total) / sum(cumulus_wall_seconds_total)",
                              lambda v: abs(v - 1) <= 0.05)
        self.assertEqual(self.scalar("cumulus_world_size"), 2)
        self.summary.append("goodput ratio %.3f, sum(categories)/wall %.4f" % (ratio, rel))
        self.prometheus_client_reads(port)

        # 4. Malformed traffic while training.
        flood_start = time.time()
        self.malformed_traffic(port)
        self.wait_step_increase("after the malformed traffic")
        # Did Prometheus's scrapes (1 s timeout) fail meanwhile? Reported, not asserted.
        window = max(5, int(math.ceil(time.time() - flood_start)) + 2)
        self.summary.append("Prometheus up{job=%s} over the last %d s (the malformed traffic): min %r, "
                            "scrape duration max %r s" % (
                                JOB, window, self.scalar('min_over_time(up{job="%s"}[%ds])' % (JOB, window)),
                                self.scalar('max_over_time(scrape_duration_seconds{job="%s"}[%ds])' % (JOB, window))))

        # 5. SIGKILL of the rank-1 worker.
        kill_rank = os.environ.get("CUMULUS_KILL_RANK", "1")
        victim = self.worker_with_rank(kill_rank)
        goodput_before = self.scalar("sum(cumulus_goodput_seconds_total)")
        os.kill(victim, signal.SIGKILL)
        self.summary.append("SIGKILLed the rank-%s worker, pid %d" % (kill_rank, victim))
        fails = self.wait_value('a failure of cause "signal SIGKILL"', 'cumulus_failures_total{cause="signal SIGKILL"}',
                                lambda v: v >= 1)
        reforms = self.wait_value("a re-forming", "sum(cumulus_reformings_total)", lambda v: v >= 1)
        self.wait_value("the replacement's join", 'cumulus_reformings_total{cause="join"}', lambda v: v >= 1)
        self.wait_value("the world to be 2 again (the replacement joined)", "cumulus_world_size", lambda v: v == 2)
        self.wait_step_increase("after the SIGKILL")
        # Each rank's collectives by kind (cumulus-train's status says them, as a Recorder's does).
        self.wait_value("both ranks' all-reduce counts", 'count(cumulus_collectives_total{op="allreduce"} > 0)',
                        lambda v: v == 2)
        goodput_after = self.scalar("sum(cumulus_goodput_seconds_total)")
        self.summary.append("sum(cumulus_goodput_seconds_total) before the SIGKILL %.3f, after %.3f"
                            % (goodput_before, goodput_after))
        by_cause = {m.get("cause"): v for m, v in self.query("cumulus_reformings_total")}
        self.summary.append("failures{signal SIGKILL} %g, reformings %g %r" % (fails, reforms, by_cause))
        self.summary.append("after the SIGKILL: " + ", ".join("%s %r" % (m, self.scalar(m)) for m in (
            "cumulus_membership_epoch", "cumulus_generation", "cumulus_restarts_total", "cumulus_epoch",
            "cumulus_goodput_ratio", "cumulus_live_records_total", "cumulus_checkpoints_total",
            "cumulus_last_checkpoint_step", "cumulus_last_checkpoint_age_seconds")))

        # 6. The live dashboard in Chromium.
        self.live_dashboard(port)

        # 7. Stop: a SIGTERM is a preemption notice; exit 75.
        self.job.send_signal(signal.SIGTERM)
        try:
            rc = self.job.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.fail("cumulus-run did not exit within 60 s of SIGTERM\n" + self.job_tail())
        self.assertEqual(rc, 75, "cumulus-run's exit code after SIGTERM (75: preempted after a checkpoint)\n"
                         + self.job_tail())
        self.assertIn("preempted at step", tail(self.job_log, 50), self.job_tail())
        self.summary.append("cumulus-run exit code after SIGTERM: %d" % rc)

        # 8. The report in Chromium against metrics.jsonl.
        records = self.read_records(run_dir)
        self.report(run_dir, records)

        # 9. TensorBoard.
        self.tensorboard(run_dir, records)

        self.summary.append("total %.1f s" % (time.monotonic() - t0))
        print("\nlive_metrics_test summary:\n  " + "\n  ".join(self.summary), file=sys.stderr)

    # -- phases ---------------------------------------------------------------------------------

    def malformed_traffic(self, port):
        socks = []
        try:
            for _ in range(50):
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                socks.append(s)
            garbage = [b"\x00\xff\xfe garbage \x01\x02\r\n\r\n", b"NOT HTTP AT ALL\r\n\r\n",
                       b"GET\r\n\r\n", b"GET /metrics HTTP/9.9 extra words\r\n\r\n",
                       b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + os.urandom(64) + b"\r\n\r\n"]
            for s, g in zip(socks[:10], garbage * 2):
                try:
                    s.sendall(g)
                except OSError:
                    pass  # closed already: allowed
            big = socks[10]
            try:
                big.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 65536 + b"\r\n\r\n")
            except OSError:
                pass  # refused mid-send: allowed

            # While all 50 are held: a fresh GET /metrics answers 200.
            t = time.monotonic()
            status, body = http_get("http://127.0.0.1:%d/metrics" % port, timeout=30)
            latency = time.monotonic() - t
            self.assertEqual(status, 200)
            self.assertIn(b"cumulus_step ", body)
            self.summary.append("GET /metrics with 50 connections held (10 garbage, 1 with a 64 KiB header): "
                                "200 in %.1f ms" % (1000 * latency))

            # Each of the 11 bad requests: a 4xx or closed.
            answers = []
            for i, s in enumerate(socks[:11]):
                a = read_http_answer(s, 20)
                answers.append(a)
                self.assertTrue(a == "closed" or (isinstance(a, int) and 400 <= a < 500),
                                "malformed request %d (%s): answer %r, expected a 4xx or a closed connection"
                                % (i, "64 KiB header" if i == 10 else repr(garbage[i % len(garbage)][:20]), a))
            self.summary.append("bad requests answered: %r" % answers)
            # The idle ones: closed by the server (its idle timeout) or still open; never an answer
            # other than a 4xx.
            idle = [read_http_answer(s, 0.5) for s in socks[11:]]
            for a in idle:
                self.assertTrue(a in ("closed", None) or (isinstance(a, int) and 400 <= a < 500),
                                "an idle connection got %r" % (a,))
            self.summary.append("idle connections: %d closed by the server, %d still open"
                                % (idle.count("closed"), idle.count(None)))
        finally:
            for s in socks:
                s.close()
        t = time.monotonic()
        status, _ = http_get("http://127.0.0.1:%d/metrics" % port, timeout=30)
        self.assertEqual(status, 200)
        self.summary.append("GET /metrics after: %.1f ms" % (1000 * (time.monotonic() - t)))

    def workers(self):
        return [p for p in descendants(self.job.pid) if proc_comm(p) == "cumulus-train"]

    def worker_with_rank(self, rank):
        def probe():
            self.check_job_alive()
            ws = self.workers()
            ranks = {p: proc_env(p).get("RANK") for p in ws}
            hit = [p for p, r in ranks.items() if r == rank]
            return len(hit) == 1 and len(ws) == 2, (hit, ranks)
        hit, _ = wait_for("exactly one cumulus-train worker with RANK=%s among 2" % rank, probe, 10, 0.1, self.job_tail)
        return hit[0]

    def live_dashboard(self, port):
        _, body = http_get("http://127.0.0.1:%d/api/status" % port)
        status = json.loads(body)
        n_ranks = len(status.get("ranks") or []) or 2
        url = "http://127.0.0.1:%d/" % port
        # The page fetches at most 1000 records a poll, a poll a (virtual) second: 10 s of virtual
        # time fetch the job's ~2,500 records with room to spare.
        t = time.monotonic()
        dom_text = self.browse("live", "--dump-dom", url, budget_ms=10000)
        browse_s = time.monotonic() - t
        with open(os.path.join(self.tmp, "live.dom"), "w") as f:
            f.write(dom_text)
        dom = Dom.parse(dom_text)
        body_el = dom.body()
        self.assertIsNotNone(body_el, "no <body> in the live DOM")
        attrs = body_el["attrs"]
        failures = []
        if attrs.get("data-ready") != "1":
            failures.append("body data-ready %r, expected '1'" % attrs.get("data-ready"))
        train_pts = len(dom.select("loss-plot", "circle", ("pt", "train")))
        if train_pts < 1:
            failures.append("svg#loss-plot holds %d train points, expected > 0" % train_pts)
        bars = dom.select("rank-rates", cls=("bar",))
        if len(bars) != n_ranks:
            failures.append("#rank-rates holds %d bars, expected %d (the ranks of /api/status)" % (len(bars), n_ranks))
        kinds = {}
        for ev in dom.select("timeline", cls=("event",)):
            k = ev["attrs"].get("data-kind")
            kinds[k] = kinds.get(k, 0) + 1
        if kinds.get("failure", 0) < 1:
            failures.append("svg#timeline has no event of kind failure: %r" % kinds)
        if kinds.get("reform", 0) + kinds.get("join", 0) < 1:
            failures.append("svg#timeline has no event of kind reform or join: %r" % kinds)
        segments = [s["attrs"].get("data-category") for s in dom.select("goodput", cls=("segment",))]
        if "training" not in segments:
            failures.append("#goodput has no training segment: %r" % segments)
        ops = [r["attrs"].get("data-op") for r in dom.select("collectives", "tr", ("op",))]
        if "allreduce" not in ops:
            failures.append("#collectives has no allreduce row: %r" % ops)
        state = dom.by_id("state")
        self.assertFalse(failures, "live dashboard %s:\n  %s\n(DOM: %s)\n%s" % (
            url, "\n  ".join(failures), os.path.join(self.tmp, "live.dom"), self.job_tail()))
        self.summary.append(
            "live dashboard (%.1f s in Chromium): records %s (status counts: %s), renders %s, %d train points, "
            "%d bars, timeline %r, goodput %r, collectives %r, state %r"
            % (browse_s, attrs.get("data-records"), status.get("counts"), attrs.get("data-renders"), train_pts,
               len(bars), kinds, segments, ops, state and state["text"].strip()))

        shot = os.environ.get("CUMULUS_SCREENSHOT") or os.path.join(self.tmp, "live.png")
        shot = os.path.abspath(shot)
        os.makedirs(os.path.dirname(shot), exist_ok=True)
        if os.path.exists(shot):
            os.remove(shot)
        self.browse("screenshot", "--window-size=1280,900", "--screenshot=" + shot, url)
        with open(shot, "rb") as f:
            head = f.read(24)
        self.assertTrue(len(head) == 24 and head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR",
                        "%s is not a PNG" % shot)
        w, h = struct.unpack(">II", head[16:24])
        self.assertEqual((w, h), (1280, 900), "the screenshot's size")
        self.summary.append("screenshot %s (%d bytes, %dx%d)" % (shot, os.path.getsize(shot), w, h))

    def read_records(self, run_dir):
        path = os.path.join(run_dir, "metrics.jsonl")
        records = []
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f):
                if line.strip():
                    try:
                        records.append(json.loads(line))
                    except ValueError as e:
                        self.fail("%s line %d is not JSON: %s: %r" % (path, i + 1, e, line[:200]))
        return records

    def report(self, run_dir, records):
        r = subprocess.run([os.path.join(BIN, "cumulus-report"), run_dir], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=120)
        self.assertEqual(r.returncode, 0, "cumulus-report %s: %s" % (run_dir, r.stdout.decode(errors="replace")))
        page = os.path.join(run_dir, "report.html")
        self.assertTrue(os.path.isfile(page), "cumulus-report wrote no %s" % page)
        dom_text = self.browse("report", "--dump-dom", "file://" + page)
        with open(os.path.join(self.tmp, "report.dom"), "w") as f:
            f.write(dom_text)
        dom = Dom.parse(dom_text)
        body = dom.body()
        self.assertIsNotNone(body, "no <body> in the report's DOM")
        self.assertEqual(body["attrs"].get("data-ready"), "1", "report body data-ready")
        train = [x for x in records if x.get("type") == "train"]
        evals = [x for x in records if x.get("type") == "eval"]
        want_train = sum(finite(x.get("loss")) for x in train)
        want_eval = sum(finite(x.get("test_loss")) for x in evals)
        got_train = len(dom.select("loss-plot", "circle", ("pt", "train")))
        got_eval = len(dom.select("loss-plot", "circle", ("pt", "eval")))
        self.assertEqual(got_train, want_train, "report: train points in #loss-plot vs train records with a finite "
                         "loss in metrics.jsonl")
        self.assertEqual(got_eval, want_eval, "report: eval points in #loss-plot vs eval records with a finite "
                         "test_loss in metrics.jsonl")
        self.assertEqual(want_eval, len(evals), "eval records without a finite test_loss")
        self.summary.append("report: %d records, %d train points, %d eval points (%s bytes)"
                            % (len(records), got_train, got_eval, os.path.getsize(page)))

    def tensorboard(self, run_dir, records):
        tb = os.path.join(run_dir, "tensorboard")
        files = sorted((f for f in os.listdir(tb) if f.startswith("events.out.tfevents.")),
                       key=lambda f: os.path.getmtime(os.path.join(tb, f)))
        self.assertTrue(files, "no events file in %s" % tb)
        loss_steps = []
        for name in files:
            r = subprocess.run([PY, READ_TFEVENTS, os.path.join(tb, name)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, timeout=300)
            self.assertEqual(r.returncode, 0, "read_tfevents.py %s: %s" % (name, r.stderr.decode(errors="replace")))
            events = [json.loads(line) for line in r.stdout.decode().splitlines() if line.strip()]
            self.assertTrue(events, "%s holds no event" % name)
            self.assertEqual(events[0].get("file_version"), "brain.Event:2", "%s's first event" % name)
            loss_steps.append([e["step"] for e in events if e.get("tag") == "train/loss"])
        train_steps = [x["step"] for x in records if x.get("type") == "train" and finite(x.get("loss"))]
        self.assertTrue(loss_steps[-1], "no train/loss scalar in %s" % files[-1])
        all_steps = [s for steps in loss_steps for s in steps]
        if len(files) == 1 or all_steps == train_steps:
            self.assertEqual(all_steps, train_steps, "train/loss steps of %s vs the train records' steps" % files)
        else:
            # Several launches: at least the last file's steps are the last train records'.
            last = loss_steps[-1]
            self.assertEqual(last, train_steps[-len(last):],
                             "train/loss steps of %s vs the last train records' steps" % files[-1])
        self.summary.append("tensorboard: %d file(s), %d train/loss scalars (last step %d) == train records"
                            % (len(files), len(all_steps), all_steps[-1]))


if __name__ == "__main__":
    # A SIGTERM (ctest, a CI runner) ends the test as an error, so its cleanups still run.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    unittest.main()
