#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""make bench: what one driver call costs, next to the exec floor.

Per call: wall time from spawn to reaped (mean, median, p95 over N runs)
and the child's max RSS (wait4 rusage, KiB).  Subjects: loop init,
isattached for another node (no kernel access) and for this node (opens
the image, scans loop devices), an unknown op, getvolumename (both answered
"Not supported") and tests/bench/floor.c, a static program that only writes
{"status":"Success"} (docs/test-lanes.md section 6).

Then, as root, the loop lifecycle kubelet drives (attach, waitforattach,
mountdevice, mount, unmount, unmountdevice, detach) on a 64Mi image, in a
private mount namespace (unshare -m --propagation private), with every
FLEXVOL_* path in a scratch directory.  Any loop device whose backing file
is in the scratch directory is detached by name at the end, even on
failure.

Nothing here asserts speed.  A reply other than the expected status is a
hard failure (exit 1).

  python3 tests/bench/bench.py --build build [--runs 300] [--lifecycle-runs 20]
"""

import argparse
import json
import math
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

PV = "pvbench"
NODE = "benchnode"
POD_UID = "5d2c7b0e-bench-4b1f-9c3a-0123456789ab"
# What kubelet's json.Marshal of the options map looks like: sorted, compact.
OPTS = {
    "file": "bench.img",
    "kubernetes.io/fsType": "ext4",
    "kubernetes.io/pvOrVolumeName": PV,
    "kubernetes.io/readwrite": "rw",
    "size": "64Mi",
}
POD_OPTS = dict(OPTS, **{
    "kubernetes.io/pod.name": "bench",
    "kubernetes.io/pod.namespace": "default",
    "kubernetes.io/pod.uid": POD_UID,
    "kubernetes.io/serviceAccount.name": "default",
})
GNU_TIME = "/usr/bin/time"
RSS_RUNS = 20  # runs under GNU time per fast call, for max RSS
LIFECYCLE_RSS_RUNS = 3  # extra lifecycle runs under GNU time
LIFECYCLE = ["attach", "waitforattach", "mountdevice", "mount", "unmount", "unmountdevice",
             "detach"]


def go_json(d):
    # encoding/json escapes <, > and & as \u003c, \u003e, \u0026
    s = json.dumps(d, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return s.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


class BenchError(Exception):
    pass


def spawn(argv, env, rss_file=None):
    """Run argv once: (seconds, maxrss KiB, exit status, stdout, stderr).

    A child forked (or vforked) from this Python process starts with
    Python's memory, and the kernel's ru_maxrss keeps that high-water mark
    across exec: wait4 here would report ~10 MiB for anything.  So with
    @rss_file the call runs under GNU time, whose own wait4 ru_maxrss (%M,
    KiB) is the child's real peak; those runs are not timed.  Without it
    the maxrss returned is 0.
    """
    if rss_file:
        argv = [GNU_TIME, "-f", "%M", "-o", rss_file] + argv
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    fa = [(os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, err_w, 2),
          (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0)]
    t0 = time.perf_counter()
    try:
        pid = os.posix_spawn(argv[0], argv, env, file_actions=fa)
    finally:
        os.close(out_w)
        os.close(err_w)
    _, status, ru = os.wait4(pid, 0)
    t = time.perf_counter() - t0
    out = b""
    err = b""
    # replies are small: after exit they sit in the pipe buffers
    while chunk := os.read(out_r, 65536):
        out += chunk
    while chunk := os.read(err_r, 65536):
        err += chunk
    os.close(out_r)
    os.close(err_r)
    maxrss = 0
    if rss_file:
        with open(rss_file) as f:
            lines = f.read().split()
        # "Command exited with non-zero status N" comes before the number
        maxrss = int(lines[-1]) if lines and lines[-1].isdigit() else 0
    return t, maxrss, os.waitstatus_to_exitcode(status), out, err


def check_reply(label, argv, rc, out, err, want):
    """The one-JSON-object contract, and the status we expect."""
    what = f"{label}: {' '.join(argv[1:])}"
    try:
        doc = json.loads(out)
    except ValueError:
        raise BenchError(f"{what}: stdout is not one JSON document: {out!r} (stderr {err!r})")
    if not isinstance(doc, dict) or doc.get("status") != want:
        raise BenchError(f"{what}: want status {want!r}, got {out.decode(errors='replace').strip()}"
                         f" (exit {rc}, stderr {err!r})")
    if err:
        raise BenchError(f"{what}: wrote to stderr: {err!r}")
    if rc != 0:
        raise BenchError(f"{what}: exit status {rc} with status {want!r}")
    return doc


def stats(times, rss):
    ms = sorted(t * 1000 for t in times)
    p95 = ms[max(0, math.ceil(0.95 * len(ms)) - 1)]
    return {"runs": len(ms), "mean": statistics.fmean(ms), "median": statistics.median(ms),
            "p95": p95, "min": ms[0], "rss": max(rss) if rss else 0}


def measure(label, argv, env, runs, rss_file, want="Success", warmup=5):
    times, rss = [], []
    for i in range(warmup + runs):
        t, _, rc, out, err = spawn(argv, env)
        check_reply(label, argv, rc, out, err, want)
        if i >= warmup:
            times.append(t)
    for i in range(min(runs, RSS_RUNS) if rss_file else 0):
        _, m, rc, out, err = spawn(argv, env, rss_file)
        check_reply(label, argv, rc, out, err, want)
        rss.append(m)
    return stats(times, rss)


def have_gnu_time():
    if not os.access(GNU_TIME, os.X_OK):
        return False
    r = subprocess.run([GNU_TIME, "-f", "%M", "true"], capture_output=True, text=True)
    return r.returncode == 0 and r.stderr.strip().isdigit()


def scratch_env(scratch):
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "LC_ALL": "C",
        "FLEXVOL_CONFIG": os.path.join(scratch, "flexvol.conf"),
        "FLEXVOL_LOOP_ROOT": os.path.join(scratch, "loop"),
        "FLEXVOL_STATE_DIR": os.path.join(scratch, "state"),
        "FLEXVOL_RUN_DIR": os.path.join(scratch, "run"),
        "FLEXVOL_LOG_FILE": os.path.join(scratch, "log", "loop.log"),
        "FLEXVOL_NODE_NAME": NODE,
        "LIBMOUNT_UTAB": os.path.join(scratch, "utab"),
    }
    return env


def prepare_scratch(scratch):
    for d in ("loop", "state", "run", "log"):
        os.makedirs(os.path.join(scratch, d), exist_ok=True)
    with open(os.path.join(scratch, "flexvol.conf"), "w") as f:
        f.write("# make bench: everything comes from the environment\n")


# --- loop devices: found and detached by name, never losetup -D ---------------

def loops_backed_by(scratch):
    found = []
    prefix = os.path.realpath(scratch) + "/"
    try:
        names = os.listdir("/sys/block")
    except OSError:
        return found
    for name in sorted(names):
        if not name.startswith("loop"):
            continue
        try:
            with open(f"/sys/block/{name}/loop/backing_file") as f:
                backing = f.read().strip()
        except OSError:
            continue
        if backing.startswith(prefix):
            found.append(f"/dev/{name}")
    return found


def detach_loops(scratch):
    left = []
    for dev in loops_backed_by(scratch):
        r = subprocess.run(["losetup", "-d", dev], capture_output=True, text=True)
        if r.returncode != 0:
            left.append(f"{dev}: {r.stderr.strip()}")
    return left


# --- the per-call table ---------------------------------------------------------

def fast_calls(build, floor, runs, scratch):
    loop = os.path.join(build, "loop")
    env = scratch_env(scratch)
    opts = go_json(OPTS)
    # the kernel path needs the image to exist: it is opened and every loop
    # device is checked for it (not bound here, so attached:false)
    with open(os.path.join(scratch, "loop", OPTS["file"]), "wb") as f:
        f.truncate(64 << 20)
    subjects = [
        ("floor (static, write only)", [floor], "Success"),
        ("loop init", [loop, "init"], "Success"),
        ("loop isattached, other node", [loop, "isattached", opts, "othernode"], "Success"),
        ("loop isattached, this node", [loop, "isattached", opts, NODE], "Success"),
        ("loop frobnicate (unknown op)", [loop, "frobnicate"], "Not supported"),
        ("loop getvolumename", [loop, "getvolumename", opts], "Not supported"),
    ]
    rss_file = os.path.join(scratch, "rss") if have_gnu_time() else None
    results = []
    for label, argv, want in subjects:
        results.append((label, measure(label, argv, env, runs, rss_file, want)))
    # sanity: the two isattached paths answer what they should
    _, _, rc, out, err = spawn([loop, "isattached", opts, "othernode"], env)
    if json.loads(out).get("attached") is not True:
        raise BenchError(f"isattached for another node: want attached:true, got {out!r}")
    _, _, rc, out, err = spawn([loop, "isattached", opts, NODE], env)
    if json.loads(out).get("attached") is not False:
        raise BenchError(f"isattached for this node: want attached:false, got {out!r}")
    os.unlink(os.path.join(scratch, "loop", OPTS["file"]))
    return results


# --- the lifecycle, run inside the private mount namespace ----------------------

def lifecycle_inner(args):
    """Runs as `unshare -m --propagation private -- bench.py --lifecycle-inner`."""
    scratch = args.scratch
    loop = os.path.join(args.build, "loop")
    env = scratch_env(scratch)
    opts, pod_opts = go_json(OPTS), go_json(POD_OPTS)
    kubelet = os.path.join(scratch, "kubelet")
    gmount = os.path.join(kubelet, "plugins/kubernetes.io/flexvolume/flexvol/loop/mounts", PV)
    poddir = os.path.join(kubelet, "pods", POD_UID, "volumes/flexvol~loop", PV)
    # kubelet creates both directories before mountdevice/mount (contract §4.1)
    os.makedirs(poddir, exist_ok=True)
    os.makedirs(gmount, exist_ok=True)

    per_op = {op: [] for op in LIFECYCLE}
    rss = {op: [] for op in LIFECYCLE}
    totals, first = [], {}
    rss_file = os.path.join(scratch, "rss") if have_gnu_time() else None
    timed = args.lifecycle_runs  # run 0 creates and formats the image
    rss_runs = LIFECYCLE_RSS_RUNS if rss_file else 0
    try:
        for i in range(timed + rss_runs):
            under_time = i >= timed
            device = None
            total = 0.0
            for op in LIFECYCLE:
                if op == "attach":
                    argv = [loop, "attach", opts, NODE]
                elif op == "waitforattach":
                    argv = [loop, "waitforattach", device, opts]
                elif op == "mountdevice":
                    argv = [loop, "mountdevice", gmount, device, opts]
                elif op == "mount":
                    argv = [loop, "mount", poddir, pod_opts]
                elif op == "unmount":
                    argv = [loop, "unmount", poddir]
                elif op == "unmountdevice":
                    argv = [loop, "unmountdevice", gmount]
                else:
                    argv = [loop, "detach", PV, NODE]
                t, m, rc, out, err = spawn(argv, env, rss_file if under_time else None)
                doc = check_reply(f"lifecycle run {i + 1}", argv, rc, out, err, "Success")
                if op == "attach":
                    device = doc.get("device") or ""
                elif op == "waitforattach":
                    device = doc.get("device")
                    if not device or not device.startswith("/dev/loop"):
                        raise BenchError(f"waitforattach returned device {device!r}")
                elif op == "mountdevice" and \
                        subprocess.run(["mountpoint", "-q", gmount]).returncode != 0:
                    raise BenchError(f"mountdevice succeeded but {gmount} is not a mount point")
                elif op == "mount" and \
                        subprocess.run(["mountpoint", "-q", poddir]).returncode != 0:
                    raise BenchError(f"mount succeeded but {poddir} is not a mount point")
                if op == args.fail_after:
                    raise BenchError(f"--fail-after {op}: stopping here to test the cleanup")
                if under_time:
                    rss[op].append(m)
                elif i == 0:
                    first[op] = t * 1000
                else:
                    per_op[op].append(t)
                total += t
            if 0 < i < timed:
                totals.append(total)
            if os.path.isdir(poddir) and os.listdir(poddir):
                raise BenchError(f"run {i + 1}: pod dir not empty after unmount: {poddir}")
            if loops_backed_by(scratch):
                raise BenchError(f"run {i + 1}: a loop device is still bound after detach: "
                                 f"{loops_backed_by(scratch)}")
        result = {"first": first, "ops": {}, "total": None}
        if totals:
            for op in LIFECYCLE:
                result["ops"][op] = stats(per_op[op], rss[op])
            result["total"] = stats(totals, [])
        with open(args.result, "w") as f:
            json.dump(result, f)
        return 0
    except BenchError as e:
        print(f"bench: FAILED: {e}", file=sys.stderr)
        return 1
    finally:
        # undo whatever a failed run left, in this namespace
        for d in (poddir, gmount):
            for _ in range(4):
                if subprocess.run(["mountpoint", "-q", d]).returncode != 0:
                    break
                subprocess.run(["umount", "-l", d], capture_output=True)
        detach_loops(scratch)


def lifecycle(build, runs, scratch, fail_after=None):
    if os.geteuid() != 0:
        return None, "needs root (loop devices, mounts)"
    if not os.path.exists("/dev/loop-control") or not shutil.which("unshare"):
        return None, "no /dev/loop-control or unshare"
    result = os.path.join(scratch, "lifecycle.json")
    cmd = ["unshare", "-m", "--propagation", "private", "--", sys.executable,
           os.path.abspath(__file__), "--lifecycle-inner", "--build", build, "--scratch", scratch,
           "--lifecycle-runs", str(runs), "--result", result]
    if fail_after:
        cmd += ["--fail-after", fail_after]
    try:
        r = subprocess.run(cmd)
    finally:
        left = detach_loops(scratch)
    if left:
        raise BenchError(f"could not detach: {left}")
    if r.returncode != 0:
        raise BenchError(f"lifecycle failed (exit {r.returncode}); log: "
                         f"{os.path.join(scratch, 'log', 'loop.log')}")
    with open(result) as f:
        return json.load(f), None


# --- output -----------------------------------------------------------------------

def print_table(results, floor):
    fl = floor["median"]
    fr = floor["rss"] or 1
    print(f"{'call':<34} {'runs':>5} {'mean ms':>8} {'median':>8} {'p95':>8} "
          f"{'x floor':>8} {'maxRSS KiB':>11} {'x floor':>8}")
    print("-" * 98)
    for label, s in results:
        print(f"{label:<34} {s['runs']:>5} {s['mean']:>8.3f} {s['median']:>8.3f} {s['p95']:>8.3f} "
              f"{s['median'] / fl:>8.2f} {s['rss']:>11} {s['rss'] / fr:>8.2f}")


def print_lifecycle(lc, floor):
    fl = floor["median"]
    fr = floor["rss"] or 1
    n = lc["total"]["runs"] if lc["total"] else 0
    print()
    print(f"loop lifecycle on a 64Mi ext4 image, private mount namespace, {n} runs "
          f"(after a first run that creates and formats the image)")
    print(f"{'op':<16} {'first ms':>9} {'mean ms':>8} {'median':>8} {'p95':>8} {'x floor':>8} "
          f"{'maxRSS KiB':>11} {'x floor':>8}")
    print("-" * 82)
    for op in LIFECYCLE:
        s = lc["ops"].get(op)
        if not s:
            print(f"{op:<16} {lc['first'][op]:>9.3f}")
            continue
        print(f"{op:<16} {lc['first'][op]:>9.3f} {s['mean']:>8.3f} {s['median']:>8.3f} "
              f"{s['p95']:>8.3f} {s['median'] / fl:>8.2f} {s['rss']:>11} {s['rss'] / fr:>8.2f}")
    if lc["total"]:
        t = lc["total"]
        print(f"{'total (7 calls)':<16} {sum(lc['first'].values()):>9.3f} {t['mean']:>8.3f} "
              f"{t['median']:>8.3f} {t['p95']:>8.3f} {t['median'] / fl:>8.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="build directory (loop, floor)")
    ap.add_argument("--runs", type=int, default=300, help="runs per fast call (default 300)")
    ap.add_argument("--lifecycle-runs", type=int, default=20,
                    help="lifecycle runs, after a first one that formats (default 20)")
    ap.add_argument("--no-lifecycle", action="store_true", help="only the per-call table")
    ap.add_argument("--json", metavar="FILE", help="also write the numbers as JSON")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--lifecycle-inner", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--scratch", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--fail-after", metavar="OP",
                    help="fail the lifecycle after OP (tests the cleanup)")
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)

    if args.lifecycle_inner:
        return lifecycle_inner(args)
    if args.runs < 1 or args.lifecycle_runs < 0:
        ap.error("run counts must be positive")

    loop = os.path.join(args.build, "loop")
    floor = os.path.join(args.build, "floor")
    for p in (loop, floor):
        if not os.access(p, os.X_OK):
            print(f"bench: {p} missing: run `make bench` (or make all {floor})", file=sys.stderr)
            return 1

    scratch = tempfile.mkdtemp(prefix="flexvol-bench-")
    prepare_scratch(scratch)
    rc = 0
    try:
        print(f"flexvol bench: {socket.gethostname()}, kernel {os.uname().release}, "
              f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}, "
              f"{args.runs} runs per call (+5 warm-up)")
        print()
        results = fast_calls(args.build, floor, args.runs, scratch)
        floor_stats = results[0][1]
        print_table(results, floor_stats)
        lc, why = (None, "--no-lifecycle") if args.no_lifecycle else \
            lifecycle(args.build, args.lifecycle_runs + 1, scratch, args.fail_after)
        if lc:
            print_lifecycle(lc, floor_stats)
        else:
            print(f"\nlifecycle skipped: {why}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"calls": dict(results), "lifecycle": lc}, f, indent=1)
    except BenchError as e:
        print(f"bench: FAILED: {e}", file=sys.stderr)
        rc = 1
    finally:
        left = detach_loops(scratch)
        if left:
            print(f"bench: could not detach {left}", file=sys.stderr)
            rc = 1
        if args.keep or rc:
            print(f"scratch kept: {scratch}", file=sys.stderr)
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
