#!/usr/bin/env python3
"""The kubelet/controller-manager simulator suite (host lane).

Every driver has a case module, tests/sim/test_<driver>.py, with DRIVER,
CASES and make_env(build, case_name) -> an object whose close() returns True
when the case left nothing behind.  This runner re-executes itself in a
private mount namespace (root), runs every case, and prints
`N passed, N failed` last.

  tests/sim/run.py [--build DIR] [-k SUBSTRING] [-v]

FLEXVOL_SIM_SKIP (comma-separated substrings) leaves out the cases whose name contains one,
each listed as `skip`: .ci/run's sanitizer step skips the SIGKILL-at-every-syscall cases (a
killed process makes no sanitizer report; their retries are the calls the other cases make).
"""
import argparse
import fcntl
import importlib
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flexsim import in_private_mount_ns  # noqa: E402


def case_modules():
    """tests/sim/test_<driver>.py, sorted by name."""
    here = os.path.dirname(os.path.abspath(__file__))
    return [importlib.import_module(f[:-3]) for f in sorted(os.listdir(here))
            if f.startswith("test_") and f.endswith(".py")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("-k", dest="pattern", default="")
    ap.add_argument("-v", action="store_true")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("tests/sim/run.py: needs root (real loop devices and mounts)")
        return 77 if os.environ.get("CI") != "true" else 1
    in_private_mount_ns([sys.executable, os.path.abspath(__file__), *sys.argv[1:]])
    # Loop devices and their "flexvol:<pv>" tags are node-wide: two runs from
    # two work trees would detach each other's "pv1".  One run at a time.
    # a fresh root's /run may be empty (no /run/lock): made here, as systemd-tmpfiles would
    os.makedirs("/run/lock", mode=0o755, exist_ok=True)
    lock = open("/run/lock/flexvol-sim.lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print("tests/sim/run.py: waiting for another simulator run on this machine", flush=True)
        fcntl.flock(lock, fcntl.LOCK_EX)
    build = os.path.abspath(a.build)
    passed = failed = 0
    t_all = time.monotonic()
    cases = []
    for mod in case_modules():
        cases += [(fn, lambda name, m=mod: m.make_env(build, name)) for fn in mod.CASES]
    skip = [x for x in os.environ.get("FLEXVOL_SIM_SKIP", "").split(",") if x]
    for fn, make_env in cases:
        if a.pattern and a.pattern not in fn.__name__:
            continue
        if any(x in fn.__name__ for x in skip):
            print("skip %s (FLEXVOL_SIM_SKIP)" % fn.__name__, flush=True)
            continue
        e = make_env(fn.__name__)
        t0 = time.monotonic()
        try:
            fn(e)
            ok, why = True, ""
        except Exception as err:  # noqa: BLE001 - any error fails the case, not the run
            ok, why = False, "%s: %s" % (type(err).__name__, err)
            if a.v:
                traceback.print_exc()
        finally:
            clean = e.close()
        if ok and not clean:
            ok, why = False, "cleanup found leftovers"
        dt = time.monotonic() - t0
        print("%-4s %-40s %6.2f s%s" % ("ok" if ok else "FAIL", fn.__name__, dt, "" if ok else "\n     " + why),
              flush=True)
        passed += ok
        failed += not ok
    print("sim: %.1f s" % (time.monotonic() - t_all))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
