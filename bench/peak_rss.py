#!/usr/bin/env python3
"""Runs a command and writes the peak resident memory of its largest process, for
bench/compare_ddp.sh, which wraps Cumulus's and DDP's launches alike.

  bench/peak_rss.py OUT_FILE -- COMMAND [ARG]...

COMMAND runs with this process's stdin, stdout and stderr; when it has exited, OUT_FILE gets one
number, the peak RSS in MiB of the largest process of the tree it started: getrusage
(RUSAGE_CHILDREN).ru_maxrss, which Linux keeps as the maximum over every descendant that was
waited for (a launcher reaps its workers, so they count; KiB on Linux). With one worker per
process that is the peak RSS per worker (launchers themselves are far smaller). The exit status
is COMMAND's (128 + N when a signal N ended it).
"""
import resource
import subprocess
import sys


def main():
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit("usage: peak_rss.py OUT_FILE -- COMMAND [ARG]...")
    code = subprocess.call(sys.argv[3:])
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    with open(sys.argv[1], "w") as f:
        f.write("%.1f\n" % (peak_kib / 1024.0))
    sys.exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main()
