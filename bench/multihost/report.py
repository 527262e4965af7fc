#!/usr/bin/env python3
"""Turns bench/multihost/run.sh's multihost.tsv into multihost.md (tables, targets) and
multihost.png (gnuplot). Usage: report.py TSV OUT_DIR LINK_GBIT NPROC"""

import collections
import os
import subprocess
import sys
import tempfile

ALGOS = ["funnel", "tree", "ring"]


def human(n):
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return "%d %s" % (n // size, unit)
    return "%d B" % n


def ms(s):
    return "%.3f" % (s * 1e3) if s < 1 else "%.0f" % (s * 1e3)


def load(path):
    rows = {}
    for line in open(path):
        f = line.split("\t")
        if len(f) < 9:
            continue
        algo, p, n = f[0], int(f[1]), int(f[2])
        rows[(algo, p, n)] = dict(iters=int(f[3]), median=float(f[4]), min=float(f[5]),
                                  predicted=float(f[6]), pick=f[7], busbw=float(f[8]))
    return rows


def plot(rows, worlds, sizes, out_png):
    with tempfile.TemporaryDirectory(prefix="cumulus-mhplot") as tmp:
        plot_in(tmp, rows, worlds, sizes, out_png)


def plot_in(tmp, rows, worlds, sizes, out_png):
    for p in worlds:
        for a in ALGOS:
            with open(os.path.join(tmp, "%s-%d.dat" % (a, p)), "w") as f:
                for n in sizes:
                    r = rows.get((a, p, n))
                    if r:
                        f.write("%d %g %g\n" % (n, r["median"], r["predicted"]))
    colors = {"funnel": "#d62728", "tree": "#2ca02c", "ring": "#1f77b4"}
    script = [
        "set terminal pngcairo size %d,520 font 'Sans,10'" % (460 * len(worlds)),
        "set output '%s'" % out_png,
        "set multiplot layout 1,%d title 'All-reduce across namespace hosts, 1 rank per host, "
        "tbf-shaped links: measured (points) vs cost model (lines)'" % len(worlds),
        "set logscale xy", "set format x '%.0s%cB'", "set format y '%g'", "set xlabel 'buffer size'",
        "set ylabel 'time per all-reduce (s)'", "set grid", "set key top left",
    ]
    for p in worlds:
        script.append("set title '%d hosts'" % p)
        parts = []
        for a in ALGOS:
            dat = os.path.join(tmp, "%s-%d.dat" % (a, p))
            parts.append("'%s' using 1:2 with points pt 7 ps 1.2 lc rgb '%s' title '%s'"
                         % (dat, colors[a], a))
            parts.append("'%s' using 1:3 with lines lw 2 dt 2 lc rgb '%s' notitle"
                         % (dat, colors[a]))
        script.append("plot " + ", ".join(parts))
    script.append("unset multiplot")
    subprocess.run(["gnuplot"], input="\n".join(script), text=True, check=True)


def main():
    tsv, out_dir, gbit, nproc = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
    rows = load(tsv)
    worlds = sorted({k[1] for k in rows})
    sizes = sorted({k[2] for k in rows})
    wire = gbit * 1e9 / 8 / 1e6  # MB/s
    lines = []
    w = lines.append
    w("# Funnel, tree and ring across hosts: measured vs the cost model\n")
    w("Each host is a network namespace on one bridge (`launch/netns-cluster.sh`), its link "
      "shaped by `tbf` to %g Gbit/s in both directions (host egress and the bridge port's "
      "egress). One `cumulus-run` per host starts one rank of `cumulus-allreduce-probe`; the "
      "data plane binds each host's own address. A call's time is the slowest rank's, each rank "
      "timing from its own exit of a barrier (a max all-reduce collects them); the figure is the "
      "median over 3-10 calls, after one untimed call that checks the sum. Predicted: "
      "`comm/cost_model.h` with α measured on each cluster (`multihost-cost-pP.json`), β = 1 / TCP "
      "payload rate (%g Gbit/s × 1448/1514 = %.1f MB/s) and the built-in γ. "
      "busbw = n/t · 2(p−1)/p.\n" % (gbit, gbit, wire * 1448 / 1514))
    w("**Caveat:** this machine has %d CPU core(s); at 8 hosts, 8 ranks (plus the parameter "
      "server thread for funnel) share them, so per-message latency (α) grows with p and small "
      "buffers measure scheduling as much as the network.\n" % nproc)
    load_path = os.path.join(out_dir, "multihost-load.txt")
    if os.path.exists(load_path):
        loads = [l.split() for l in open(load_path) if l.strip()]
        w("Load average (1 min) when each cluster started, other users' jobs included: " +
          ", ".join("%s hosts %s" % (p, l) for p, l in loads) + ". Ring, whose ranks all copy "
          "and reduce at once, is the algorithm this hurts most.\n")
    w("Reproduce: `sudo bench/multihost/run.sh` (about 4 minutes), after "
      "`cmake --build build --target cumulus-run cumulus-allreduce-probe`.\n")
    w("![measured vs predicted](multihost.png)\n")
    strict = tolerant = total = 0
    misses = []
    for p in worlds:
        w("## %d hosts\n" % p)
        w("| size | funnel ms (pred) | tree ms (pred) | ring ms (pred) | fastest | auto → | "
          "auto ms | ring busbw MB/s |")
        w("|---|---|---|---|---|---|---|---|")
        for n in sizes:
            cells = []
            best, best_t = None, float("inf")
            for a in ALGOS:
                r = rows.get((a, p, n))
                if not r:
                    cells.append("–")
                    continue
                cells.append("%s (%s)" % (ms(r["median"]), ms(r["predicted"])))
                if r["median"] < best_t:
                    best, best_t = a, r["median"]
            auto = rows.get(("auto", p, n))
            ring = rows.get(("ring", p, n))
            if auto and best:
                total += 1
                strict += auto["pick"] == best
                picked = rows.get((auto["pick"], p, n))
                ok = picked is not None and picked["median"] <= 1.10 * best_t
                tolerant += ok
                if auto["pick"] != best:
                    misses.append("%d hosts, %s: auto took %s (%s ms), %s was %s ms" % (
                        p, human(n), auto["pick"], ms(picked["median"]) if picked else "?", best,
                        ms(best_t)))
            w("| %s | %s | **%s** | %s | %s | %s |" % (
                human(n), " | ".join(cells), best or "–", auto["pick"] if auto else "–",
                ms(auto["median"]) if auto else "–", "%.1f" % ring["busbw"] if ring else "–"))
        w("")
    w("## Targets\n")
    big = max(sizes)
    r8 = rows.get(("ring", max(worlds), big))
    if r8:
        w("- Ring busbw at %d hosts, %s: **%.1f MB/s = %.0f%% of the %g Gbit/s link** "
          "(%.1f MB/s on the wire); target ≥ 80%%. Best call: %.1f MB/s." % (
              max(worlds), human(big), r8["busbw"], 100 * r8["busbw"] / wire, gbit, wire,
              big / r8["min"] * 2 * (max(worlds) - 1) / max(worlds) / 1e6))
    ceiling_path = os.path.join(out_dir, "multihost-ceiling.tsv")
    if os.path.exists(ceiling_path):
        for (a, p, n), c in load(ceiling_path).items():
            share = c["busbw"] / wire
            if share < 1.0:
                why = ("on this machine the ring is CPU-bound at %d hosts before the link is; the "
                       "80%% target needs about one core per rank (or the same run on real hosts)."
                       % p)
            else:
                why = ("so the %d cores can carry the bytes of %d ranks at the link rate. The "
                       "shaped run most likely falls short because the %d simulated hosts share "
                       "those cores: a rank waiting for a core leaves its rate-limited link idle, "
                       "which the link cannot make up afterwards, and every ring step waits for "
                       "the slowest link. Real hosts have a core per rank. At fewer hosts the "
                       "shaped ring gets closer to the link (the busbw columns above)." % (nproc, p, p))
            w("- CPU ceiling: the same ring at %d hosts, %s on links 100× faster (so only the "
              "%d shared cores limit it) takes %s ms, busbw **%.1f MB/s = %.0f%% of %g Gbit/s**: "
              "%s" % (p, human(n), nproc, ms(c["median"]), c["busbw"], 100 * share, gbit, why))
    f2 = rows.get(("funnel", 2, big))
    if f2:
        ratios = []
        for p in worlds:
            fp = rows.get(("funnel", p, big))
            if fp and p > 2:
                ratios.append("%d hosts: %.2f× (p−1 = %d)" % (p, fp["median"] / f2["median"], p - 1))
        w("- Funnel time at %s relative to 2 hosts: %s; target ≈ (p−1)×." % (
            human(big), ", ".join(ratios)))
    if total:
        w("- `auto` picked the measured-fastest algorithm at **%d of %d** points (%.0f%%); its "
          "pick was within 10%% of the fastest at %d of %d (%.0f%%); target ≥ 90%%." % (
              strict, total, 100 * strict / total, tolerant, total, 100 * tolerant / total))
        for m in misses:
            w("  - miss: " + m)
    w("")
    w("## Who wins where, and why\n")
    w("- **Funnel: the hotspot.** Every rank ships its whole buffer to the parameter server on "
      "host 0 and gets the sum back, so host 0's one link carries (p−1)·n each way while the "
      "other links idle: time grows as p−1 (the ratios above), and the cost model's "
      "2(p−1)(α+nβ) matches within about 10% from 64 KiB up. Below that, each call is a few "
      "gRPC round trips (~0.3-2 ms), far above α. It never wins here.")
    w("- **Tree: latency.** 2⌈log₂p⌉ steps instead of 2(p−1), so it has the fewest "
      "sequential messages: it wins the smallest buffers at 4 and 8 hosts, where a call is "
      "mostly per-message latency. But every step moves the whole buffer and the root's "
      "link carries it ⌈log₂p⌉ times each way, so from a few KiB up it loses to the ring, "
      "and its measured times follow 2⌈log₂p⌉·nβ closely.")
    w("- **Ring: bandwidth.** Each rank sends and receives 2(p−1)/p·n, spread evenly over "
      "every link at once, so in the model its time barely depends on p, the only algorithm "
      "whose busbw holds up as p grows. It wins everything from 16 KiB up. It is also the one that needs "
      "every rank on a CPU at the same time (all p copy and reduce together); with 2 cores "
      "for 8 ranks and other jobs, it falls short of the model at 4 and 8 hosts (the gap is "
      "the CPU, not the links: at 2 hosts it reaches %.0f MB/s, %.0f%% of the wire)." % (
          rows[("ring", min(worlds), big)]["busbw"],
          100 * rows[("ring", min(worlds), big)]["busbw"] / wire) if ("ring", min(worlds), big) in rows
      else "")
    w("- **auto** uses the same model with α measured on each cluster (`--calibrate`: "
      "one-float tree and ring all-reduces) and β from the link rate. It picks the ring almost "
      "everywhere; its misses are the 4 KiB points where tree and ring are within the "
      "scheduling noise of shared cores.")
    w("")
    with open(os.path.join(out_dir, "multihost.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    plot(rows, worlds, sizes, os.path.join(out_dir, "multihost.png"))


if __name__ == "__main__":
    main()
