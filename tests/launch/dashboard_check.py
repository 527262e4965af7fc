#!/usr/bin/env python3
"""Helpers for dashboard_test.sh.

  dashboard_check.py embed PAGE FIXTURE OUT [--no-status]
      Writes OUT: PAGE with `null` on its CUMULUS_EMBEDDED line replaced by the
      fixture, escaped as cumulus-report does it (no "<", ">", "&", U+2028 or
      U+2029 but as \\u escapes). With --no-status the embedded status is null.
  dashboard_check.py dom DOM FIXTURE MODE
      Checks a DOM dumped by Chromium against the fixture. MODE is "static"
      (the report with status), "static-no-status" or "live". Prints what it
      checked; exits 1 with one line per failure.
  dashboard_check.py png FILE WIDTH HEIGHT
      Checks FILE is a PNG of that size.
"""
import html.parser
import json
import math
import os
import shutil
import struct
import subprocess
import sys

PLACEHOLDER = "const CUMULUS_EMBEDDED = null; // replaced by cumulus-report"
# Timeline kind of each record, as the page documents it.
AGENT_KINDS = {"preemption": "preempted", "failure": "failure", "restart": "restart", "join": "join", "leave": "leave"}
RECORD_KINDS = ("checkpoint", "checkpoint_failed", "preempted", "reform")
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


def find_chromium():
    """$CHROMIUM, else the first headless Chromium on PATH; None when there is none."""
    if os.environ.get("CHROMIUM"):
        return os.environ["CHROMIUM"]
    for name in ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def render_dom(url, profile):
    """The DOM headless Chromium renders of a dashboard at `url` (a live job's page or a file of
    cumulus-report) after 5 s of virtual time; `profile` is its scratch directory."""
    chromium = find_chromium()
    if chromium is None:
        raise RuntimeError("no Chromium: run scripts/install-deps.sh or set CHROMIUM")
    dom = subprocess.run(["timeout", "60", chromium, "--headless", "--no-sandbox", "--disable-gpu",
                          "--no-first-run", "--user-data-dir=" + profile,
                          "--virtual-time-budget=5000", "--dump-dom", url],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=90)
    if dom.returncode != 0:
        raise RuntimeError("chromium exited with %d on %s" % (dom.returncode, url))
    return Dom.parse(dom.stdout)


def embed(page_path, fixture_path, out_path, no_status):
    page = open(page_path, encoding="utf-8").read()
    n = page.count(PLACEHOLDER)
    if n != 1:
        sys.exit("dashboard_check: %s holds the placeholder line %d times, not once" % (page_path, n))
    data = json.load(open(fixture_path, encoding="utf-8"))
    if no_status:
        data["status"] = None
    # ensure_ascii (the default) writes U+2028 and U+2029 as \u escapes already.
    blob = json.dumps(data).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(page.replace(PLACEHOLDER, PLACEHOLDER.replace("null", blob, 1)))


class Dom(html.parser.HTMLParser):
    """Every element with its attributes, its ancestors' ids and its text."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.elements = [], []

    @classmethod
    def parse(cls, text):
        dom = cls()
        dom.feed(text)
        return dom

    def handle_starttag(self, tag, attrs):
        el = {"tag": tag, "attrs": dict(attrs), "ids": {s["attrs"].get("id") for s in self.stack} - {None}, "text": ""}
        el["ids"].add(el["attrs"].get("id"))
        self.elements.append(el)
        if tag not in VOID:
            self.stack.append(el)

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.stack.pop()

    def handle_endtag(self, tag):
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i]["tag"] == tag:
                del self.stack[i:]
                break

    def handle_data(self, data):
        for el in self.stack:
            el["text"] += data

    def select(self, within, tag=None, cls=(), **attrs):
        """Elements inside (or being) the element with id `within`."""
        out = []
        for el in self.elements:
            classes = el["attrs"].get("class", "").split()
            if within in el["ids"] and (tag is None or el["tag"] == tag) and all(c in classes for c in cls) \
                    and all(el["attrs"].get(k.replace("_", "-")) == v for k, v in attrs.items()):
                out.append(el)
        return out

    def by_id(self, id_):
        return next((el for el in self.elements if el["attrs"].get("id") == id_), None)

    def body(self):
        return next((el for el in self.elements if el["tag"] == "body"), None)


def finite(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def check_dom(dom_path, fixture_path, mode):
    data = json.load(open(fixture_path, encoding="utf-8"))
    records, status = data["records"], (None if mode == "static-no-status" else data.get("status"))
    dom = Dom()
    dom.feed(open(dom_path, encoding="utf-8", errors="replace").read())
    failures, checked = [], []

    def expect(what, got, want):
        checked.append("%s: %s" % (what, got))
        if got != want:
            failures.append("%s: got %r, expected %r" % (what, got, want))

    body = next((el for el in dom.elements if el["tag"] == "body"), None)
    if body is None:
        sys.exit("dashboard_check: no <body> in %s" % dom_path)
    expect("body data-ready", body["attrs"].get("data-ready"), "1")
    expect("body data-records", body["attrs"].get("data-records"), str(len(records)))
    if not body["attrs"].get("data-renders", "0").isdigit() or int(body["attrs"].get("data-renders", "0")) < 1:
        failures.append("body data-renders: %r, expected a count >= 1" % body["attrs"].get("data-renders"))

    train = [r for r in records if r.get("type") == "train"]
    evals = [r for r in records if r.get("type") == "eval"]
    expect("train points in #loss-plot", len(dom.select("loss-plot", "circle", ("pt", "train"))),
           sum(finite(r.get("loss")) for r in train))
    expect("eval points in #loss-plot", len(dom.select("loss-plot", "circle", ("pt", "eval"))),
           sum(finite(r.get("test_loss")) for r in evals))

    if status and status.get("ranks"):
        bars = dom.select("rank-rates", cls=("bar",))
        expect("bars in #rank-rates", len(bars), len(status["ranks"]))
        expect("their data-rank", [b["attrs"].get("data-rank") for b in bars], [str(r["rank"]) for r in status["ranks"]])
    else:
        expect("points in #rate-plot", len(dom.select("rate-plot", "circle", ("pt",))),
               sum(finite(r.get("samples_per_sec")) for r in train))

    kinds = {}
    for r in records:
        kind = r["type"] if r.get("type") in RECORD_KINDS else AGENT_KINDS.get(r.get("event")) if r.get("type") == "agent" else None
        if kind:
            kinds[kind] = kinds.get(kind, 0) + 1
    for kind in sorted(set(kinds) | {"checkpoint", "checkpoint_failed", "preempted", "reform", "failure", "restart", "join", "leave"}):
        expect("%s events in #timeline" % kind, len(dom.select("timeline", cls=("event",), data_kind=kind)), kinds.get(kind, 0))
    expect("events in #timeline", len(dom.select("timeline", cls=("event",))), sum(kinds.values()))

    goodputs = [r for r in records if r.get("type") == "goodput"]
    gp = goodputs[-1] if goodputs else (status or {}).get("goodput")
    segments = dom.select("goodput", cls=("segment",))
    expect("#goodput segments", [s["attrs"].get("data-category") for s in segments],
           [c for c in ("training", "comm_wait", "startup", "evaluation", "checkpoint", "reform", "restart", "redone", "other")
            if finite(gp.get(c + "_s")) and gp[c + "_s"] > 0])
    ratio = dom.by_id("goodput-ratio")
    expect("#goodput-ratio", ratio and ratio["text"].strip(), "%.1f%%" % (100 * gp["productive_ratio"]))

    balances = [r for r in records if r.get("type") == "balance" and isinstance(r.get("shares"), list)]
    shares = balances[-1]["shares"] if balances else (status or {}).get("shares") or []
    got = dom.select("shares", cls=("share",))
    expect("#shares bars", len(got), len(shares))
    expect("#shares data-samples", [s["attrs"].get("data-samples") for s in got], [str(v) for v in shares])
    expect("#shares data-rank", [s["attrs"].get("data-rank") for s in got], [str(i) for i in range(len(shares))])

    # The collectives table: one row per kind any rank reports, its count and bytes summed over
    # the ranks that report (rank 2 of the fixture reports none); none at all without a status.
    ops = {}
    for r in (status or {}).get("ranks") or []:
        for op, c in (r.get("collectives") or {}).items():
            sum_ = ops.setdefault(op, [0, 0])
            sum_[0] += c["count"]
            sum_[1] += c["bytes_sent"]
    rows = dom.select("collectives", "tr", ("op",))
    expect("#collectives rows", [(x["attrs"].get("data-op"), x["attrs"].get("data-count"), x["attrs"].get("data-bytes"))
                                 for x in rows],
           [(op, str(ops[op][0]), str(ops[op][1])) for op in sorted(ops)])

    st = dom.by_id("state")
    expect("#state", st and st["text"].strip(), (status or {}).get("state") or "finished")
    live = dom.by_id("live")
    live_text = live["text"].strip() if live else ""
    if mode == "live":
        if not live_text.startswith("live"):
            failures.append("#live: %r, expected it to start with 'live'" % live_text)
    elif not live_text.startswith("report"):
        failures.append("#live: %r, expected it to start with 'report'" % live_text)
    title = dom.by_id("title")
    if (mode != "live") != bool(title and "report" in title["text"]):
        failures.append("#title: %r, should name a report exactly in the static modes" % (title and title["text"]))

    print("  " + "\n  ".join(checked))
    if failures:
        print("dashboard_check %s: %d failure(s):\n  %s" % (mode, len(failures), "\n  ".join(failures)), file=sys.stderr)
        sys.exit(1)


def check_png(path, width, height):
    head = open(path, "rb").read(24)
    if len(head) < 24 or head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        sys.exit("dashboard_check: %s is not a PNG" % path)
    w, h = struct.unpack(">II", head[16:24])
    if (w, h) != (width, height):
        sys.exit("dashboard_check: %s is %dx%d, expected %dx%d" % (path, w, h, width, height))


if __name__ == "__main__":
    a = sys.argv[1:]
    if a[:1] == ["embed"] and len(a) in (4, 5):
        embed(a[1], a[2], a[3], a[4:] == ["--no-status"])
    elif a[:1] == ["dom"] and len(a) == 4 and a[3] in ("static", "static-no-status", "live"):
        check_dom(a[1], a[2], a[3])
    elif a[:1] == ["png"] and len(a) == 4:
        check_png(a[1], int(a[2]), int(a[3]))
    else:
        sys.exit(__doc__)
