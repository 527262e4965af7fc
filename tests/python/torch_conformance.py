"""torch's own distributed test suite on a backend: the tests of DistributedTest._DistTestBase,
which the wheel ships (torch/testing/_internal/distributed/distributed_test.py) and which PyTorch
runs for gloo, one spawned process per rank over a file:// init method.

    PYTHONPATH=build/python .venv/bin/python tests/python/torch_conformance.py \\
        --backend cumulus --world-size 2 [-k PATTERN ...] [--exact] [--json OUT]

Prints one line per test (`ok`, `FAIL`, `ERROR`, `skip: <reason>`) and the counts; with --json,
writes {test: [outcome, detail]} for comparing two backends (`--backend gloo` on the same tests).

For `cumulus` the script adds the backend to the feature sets that describe what gloo does on CPU
(ddp, subgroup, plugin), so that the tests gloo runs are run, not skipped; a test that names gloo
itself (`BACKEND == "gloo"`) is still skipped for another backend, and the counts say how many.

With `--pose-as gloo` the tests are chosen and written as for gloo (their skip decorators and
their `BACKEND == "gloo"` branches see gloo) while every group they make, the default one and
each `new_group(backend="gloo")`, is made on --backend: the tests that name gloo, run on another
backend. A test that then fails may assert gloo's own wording or name (`get_backend()`), which
the detail says.
"""

import argparse
import json
import os
import re
import sys
import time
import unittest

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="cumulus")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("-k", dest="patterns", action="append", default=[],
                        help="run only the tests whose name contains PATTERN (repeatable)")
    parser.add_argument("--exact", action="store_true",
                        help="each -k is a whole test name, not a part of one")
    parser.add_argument("--no-skips", action="store_true",
                        help="a skipped test fails the run too (for a list that must all run)")
    parser.add_argument("--json", help="write every test's outcome here")
    parser.add_argument("--list", action="store_true", help="list the tests and exit")
    parser.add_argument("--pose-as", metavar="BACKEND",
                        help="choose and write the tests as for BACKEND, run them on --backend")
    ARGS = parser.parse_args()
    # Read by distributed_test.py at import, here and in every spawned rank (which inherits them);
    # each test makes its own TEMP_DIR (initialize_temp_directories) and removes it.
    os.environ["BACKEND"] = ARGS.pose_as or ARGS.backend
    os.environ["CONFORMANCE_BACKEND"] = ARGS.backend
    os.environ["WORLD_SIZE"] = str(ARGS.world_size)
    os.environ.setdefault("OMP_NUM_THREADS", "1")

BACKEND = os.environ.get("BACKEND", "")                     # what the tests see
RUN_ON = os.environ.get("CONFORMANCE_BACKEND", BACKEND)      # what their groups are made on
if RUN_ON == "cumulus":
    import cumulus  # noqa: F401  registers the backend, in the parent and in each spawned rank

if RUN_ON != BACKEND:
    import torch.distributed as dist

    def _on_run_backend(make):
        def made(*args, **kwargs):
            if str(kwargs.get("backend", "")).lower() == BACKEND:
                kwargs["backend"] = RUN_ON
            return make(*args, **kwargs)
        return made

    # Both names: new_subgroups calls distributed_c10d's own.
    for name in ("init_process_group", "new_group"):
        made = _on_run_backend(getattr(dist.distributed_c10d, name))
        setattr(dist.distributed_c10d, name, made)
        setattr(dist, name, made)

from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

if BACKEND == "cumulus":
    # What gloo does on CPU, cumulus claims too; nothing about GPUs.
    for feature in ("ddp", "subgroup", "plugin"):
        DistTestCases.backend_feature[feature].add("cumulus")

from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


class Tally(unittest.TextTestResult):
    """Records each test's outcome and prints one line for it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outcomes = {}
        self.started = 0.0

    def name(self, test):
        return test.id().rsplit(".", 1)[-1]

    def startTest(self, test):
        self.started = time.monotonic()
        unittest.TestResult.startTest(self, test)

    def record(self, test, outcome, detail=""):
        seconds = time.monotonic() - self.started
        self.outcomes[self.name(test)] = [outcome, detail]
        line = f"{self.name(test)} ... {outcome}" + (f": {detail}" if detail else "")
        print(f"{line} ({seconds:.1f} s)", flush=True)

    def addSuccess(self, test):
        unittest.TestResult.addSuccess(self, test)
        self.record(test, "ok")

    def addFailure(self, test, err):
        unittest.TestResult.addFailure(self, test, err)
        self.record(test, "FAIL", self.last_line(test, err))

    def addError(self, test, err):
        unittest.TestResult.addError(self, test, err)
        self.record(test, "ERROR", self.last_line(test, err))

    def addSkip(self, test, reason):
        unittest.TestResult.addSkip(self, test, reason)
        self.record(test, "skip", reason)

    def addExpectedFailure(self, test, err):
        unittest.TestResult.addExpectedFailure(self, test, err)
        self.record(test, "ok", "expected failure")

    def addUnexpectedSuccess(self, test):
        unittest.TestResult.addUnexpectedSuccess(self, test)
        self.record(test, "FAIL", "unexpected success")

    def last_line(self, test, err):
        """The last exception line of the failure (a rank's own, when a rank failed)."""
        lines = self._exc_info_to_string(err, test).strip().splitlines()
        raised = [l.strip() for l in lines if re.match(r"^\s*[\w.]+(Error|Exception): ", l)]
        return (raised[-1] if raised else lines[-1] if lines else "")[:300]


def main():
    loader = unittest.TestLoader()
    names = loader.getTestCaseNames(TestDistBackendWithSpawn)
    if ARGS.patterns:
        if ARGS.exact:
            names = [n for n in names if n in ARGS.patterns]
        else:
            names = [n for n in names if any(p in n for p in ARGS.patterns)]
    if ARGS.list:
        print("\n".join(names))
        return 0
    suite = unittest.TestSuite(TestDistBackendWithSpawn(n) for n in names)
    runner = unittest.TextTestRunner(resultclass=Tally, verbosity=0, stream=open(os.devnull, "w"))
    result = runner.run(suite)
    counts = {}
    for outcome, _ in result.outcomes.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    posing = f" (the tests written for {ARGS.pose_as})" if ARGS.pose_as else ""
    print(f"{ARGS.backend}{posing}, world size {ARGS.world_size}: " +
          ", ".join(f"{n} {o}" for o, n in sorted(counts.items())) + f" of {len(names)}")
    if ARGS.json:
        with open(ARGS.json, "w") as out:
            json.dump({"backend": ARGS.backend, "pose_as": ARGS.pose_as,
                       "world_size": ARGS.world_size,
                       "outcomes": result.outcomes}, out, indent=1, sort_keys=True)
    if ARGS.no_skips and result.skipped:
        print(f"{len(result.skipped)} test(s) skipped, and --no-skips asks that each one run")
        return 1
    if not names:
        print("no test matched")
        return 1
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
