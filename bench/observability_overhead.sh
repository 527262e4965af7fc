#!/bin/bash
# What watching a run costs its training (docs/observability.md, docs/benchmarks.md): the same job
# under cumulus-run, three ways, interleaved over --reps repetitions (the order rotates each
# repetition, so a drift of the machine's speed does not always favour one):
#   off       no --metrics-port
#   serve     --metrics-port: the workers send their records and status through the Store, node 0
#             serves, nobody reads
#   watched   --metrics-port with Debian's Prometheus scraping /metrics every second and a headless
#             Chromium holding the live dashboard open (it polls /api/records and /api/status every
#             second), all on this machine
# Throughput is the job's training samples/s: steps x global batch / the trained seconds of rank 0
# ("trained N steps in T s"; evaluations and start-up excluded). For each repetition the ratio to
# "off" is printed; then the median ratio per way. The CPU seconds Prometheus and Chromium took
# are printed beside "watched": on a real fleet they run elsewhere, here they share the cores.
#
#   bench/observability_overhead.sh [--reps 5] [--config configs/fashion_mnist_convnet.yaml]
#       [--nproc 2] [--steps 400] [--set KEY=VALUE]... [--bin-dir build/bin] [--out FILE]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
python=${CUMULUS_PYTHON:-$root/.venv/bin/python}  # the project environment, with torch
reps=5; config="$root/configs/fashion_mnist_convnet.yaml"; nproc=2; steps=400
bin_dir="$root/build/bin"; out="$here/results/observability/overhead.jsonl"; sets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps="$2"; shift 2 ;;
    --config) config="$2"; shift 2 ;;
    --nproc) nproc="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --set) sets+=("$2"); shift 2 ;;
    --bin-dir) bin_dir="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "observability_overhead.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
for b in cumulus-run cumulus-train; do
  [ -x "$bin_dir/$b" ] || { echo "observability_overhead.sh: $bin_dir/$b is missing; build it first" >&2; exit 2; }
done
for b in prometheus chromium-headless-shell; do
  command -v "$b" >/dev/null || { echo "observability_overhead.sh: $b is missing; run scripts/install-deps.sh" >&2; exit 2; }
done
mkdir -p "$(dirname "$out")"
set_json=$("$python" -c 'import json,sys; print(json.dumps(sys.argv[1:]))' "${sets[@]+"${sets[@]}"}")
exec "$python" - "$reps" "$config" "$nproc" "$steps" "$bin_dir" "$out" "$set_json" <<'PY'
import json, os, re, shutil, signal, socket, statistics, subprocess, sys, tempfile, time, urllib.request

reps, config, nproc, steps, bin_dir, out, set_json = sys.argv[1:]
reps, nproc, steps = int(reps), int(nproc), int(steps)
sets = json.loads(set_json)
work = tempfile.mkdtemp(prefix="cumulus-observability-")
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port

def cpu_seconds(session):
    """CPU seconds of the live processes of a session (a client and every process it started)."""
    ticks = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = open("/proc/%s/stat" % entry).read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session:  # the session id
            ticks += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    return ticks / os.sysconf("SC_CLK_TCK")

def wait_http(url, deadline):
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return True
        except Exception:
            time.sleep(0.1)
    return False

def run(way, rep):
    tag = "%s-%d" % (way, rep)
    run_dir = os.path.join(work, tag)
    port = free_port()
    cmd = [os.path.join(bin_dir, "cumulus-run"), "--standalone", "--nproc-per-node", str(nproc),
           "--log-dir", os.path.join(work, "logs")]
    if way != "off":
        cmd += ["--metrics-port", str(port)]
    cmd += ["--", os.path.join(bin_dir, "cumulus-train"), config, "--set",
            "trainer.max_steps=%d" % steps, "--set", "trainer.run_dir=" + run_dir]
    for kv in sets:
        cmd += ["--set", kv]
    clients = []
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           start_new_session=True)
    if way == "watched":
        if not wait_http("http://127.0.0.1:%d/metrics" % port, time.time() + 30):
            raise SystemExit("the endpoint of %s never answered" % tag)
        pdir = os.path.join(work, tag + "-prom")
        os.makedirs(pdir)
        with open(os.path.join(pdir, "prometheus.yml"), "w") as f:
            f.write("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: cumulus\n"
                    "    static_configs:\n      - targets: ['127.0.0.1:%d']\n" % port)
        clients.append(subprocess.Popen(
            ["prometheus", "--config.file=" + os.path.join(pdir, "prometheus.yml"),
             "--storage.tsdb.path=" + os.path.join(pdir, "data"),
             "--web.listen-address=127.0.0.1:%d" % free_port()],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        clients.append(subprocess.Popen(
            ["chromium-headless-shell", "--headless", "--no-sandbox", "--disable-gpu",
             "--no-first-run", "--user-data-dir=" + os.path.join(work, tag + "-chromium"),
             "--remote-debugging-port=0", "http://127.0.0.1:%d/" % port],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
    output = job.communicate()[0]
    client_cpu = sum(cpu_seconds(c.pid) for c in clients)
    for c in clients:
        os.killpg(c.pid, signal.SIGKILL)
        c.wait()
    if job.returncode != 0:
        raise SystemExit("%s exited %d:\n%s" % (tag, job.returncode, output[-3000:]))
    m = re.search(r"\[rank0\].*trained (\d+) steps in ([0-9.]+) s", output)
    batch = re.search(r"global_batch_size: (\d+)", open(os.path.join(run_dir, "config.yaml")).read())
    samples_per_s = int(m.group(1)) * int(batch.group(1)) / float(m.group(2))
    return {"way": way, "rep": rep, "samples_per_s": round(samples_per_s, 1),
            "trained_s": float(m.group(2)), "client_cpu_s": round(client_cpu, 2)}

ways = ["off", "serve", "watched"]
results = []
print("observability_overhead.sh: %s, %d workers, %d steps, %d reps; %s" %
      (os.path.basename(config), nproc, steps, reps, cpu), file=sys.stderr)
for rep in range(reps):
    order = ways[rep % 3:] + ways[:rep % 3]
    row = {}
    for way in order:
        row[way] = run(way, rep)
        results.append(row[way])
    print("rep %d: off %.1f, serve %.1f (%.4f), watched %.1f (%.4f; clients %.1f CPU s)" % (
        rep, row["off"]["samples_per_s"], row["serve"]["samples_per_s"],
        row["serve"]["samples_per_s"] / row["off"]["samples_per_s"],
        row["watched"]["samples_per_s"],
        row["watched"]["samples_per_s"] / row["off"]["samples_per_s"],
        row["watched"]["client_cpu_s"]), file=sys.stderr)
stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
with open(out, "a") as f:
    for r in results:
        f.write(json.dumps(dict(r, config=os.path.basename(config), nproc=nproc, steps=steps,
                                cpu=cpu, measured_at=stamp)) + "\n")
print("| way | samples/s, median | ratio to off: median (min, max) over %d reps | Prometheus + Chromium CPU s |" % reps)
print("|---|---|---|---|")
for way in ways:
    rs = [r for r in results if r["way"] == way]
    ratios = [r["samples_per_s"] / o["samples_per_s"] for r, o in
              zip(rs, [r for r in results if r["way"] == "off"])]
    print("| %s | %.1f | %.4f (%.4f, %.4f) | %s |" % (
        way, statistics.median(r["samples_per_s"] for r in rs), statistics.median(ratios),
        min(ratios), max(ratios),
        "%.1f" % statistics.median(r["client_cpu_s"] for r in rs) if way == "watched" else "-"))
print("\n%s; load average %s" % (stamp, open("/proc/loadavg").read().split()[0:3]))
shutil.rmtree(work)
PY
