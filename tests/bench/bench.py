#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""make bench: what one driver call costs, next to the exec floor.

Per call: wall time from spawn to reaped (mean, median, p95 over N runs)
and the child's max RSS (wait4 rusage, KiB).  Subjects: loop init,
isattached for another node and for this node (both lexical since the
logical attach of issue 10; the row keeps its old name: it used to open
the image and scan loop devices), an unknown op, getvolumename (both answered
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
import concurrent.futures
import errno
import fcntl
import json
import math
import os
import re
import shutil
import signal
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


def spawn_ru(argv, env):
    """Run argv once: (seconds, the child's rusage from wait4, exit status, stdout, stderr)."""
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
    return t, ru, os.waitstatus_to_exitcode(status), out, err


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
    t, _, rc, out, err = spawn_ru(argv, env)
    maxrss = 0
    if rss_file:
        with open(rss_file) as f:
            lines = f.read().split()
        # "Command exited with non-zero status N" comes before the number
        maxrss = int(lines[-1]) if lines and lines[-1].isdigit() else 0
    return t, maxrss, rc, out, err


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


def run_on_tmpfs(scratch):
    """A scratch directory's run directory (the locks) on a tmpfs of its own, as /run/flexvol
    is on a node: for the benches that keep everything else on the disk.  In a private
    mount namespace; undone by its end or undo_run_tmpfs()."""
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "flexvol-run",
                    os.path.join(scratch, "run")], check=True)


def busy_node(scratch, n):
    """@n small tmpfs mounts under @scratch/busy, in the caller's private mount namespace (gone
    with it): a node running pods has hundreds, and the drivers read the mount table
    (cycle.py and csi.py --mounts)."""
    for i in range(n):
        m = os.path.join(scratch, "busy", str(i))
        os.makedirs(m)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", f"busy{i}", m], check=True)


MOUNTS_HELP = "N more mounts in the namespace first: a busy node's mount table"


def undo_run_tmpfs(scratch):
    subprocess.run(["umount", "-l", os.path.join(scratch, "run")], capture_output=True)


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


def release_scratch(scratch, rc, keep=False):
    """Detach what is left bound in @scratch and remove it, unless kept (@keep, a failure:
    its log).  Returns @rc, or 1 when something could not be detached."""
    left = detach_loops(scratch)
    if left:
        print(f"bench: could not detach {left}", file=sys.stderr)
        rc = 1
    if keep or rc:
        print(f"scratch kept: {scratch}", file=sys.stderr)
    else:
        shutil.rmtree(scratch, ignore_errors=True)
    return rc


def detach_loops(scratch):
    left = []
    for dev in loops_backed_by(scratch):
        r = subprocess.run(["losetup", "-d", dev], capture_output=True, text=True)
        if r.returncode != 0:
            left.append(f"{dev}: {r.stderr.strip()}")
    return left


# --- the per-call table ---------------------------------------------------------

def interleaved(subjects, env, runs, warmup=5):
    """Time every subject next to the floor: floor, s1, floor, s2, ... per round.

    Load on a shared machine then hits the floor and each subject alike.
    Returns {label: {"times": [...], "floor": [...]}} where "floor" holds
    the floor run just before each of the subject's runs.
    """
    floor = subjects[0]
    res = {label: {"times": [], "floor": []} for label, _, _ in subjects}
    for i in range(warmup + runs):
        for label, argv, want in subjects[1:]:
            tf, _, rc, out, err = spawn(floor[1], env)
            check_reply(floor[0], floor[1], rc, out, err, floor[2])
            t, _, rc, out, err = spawn(argv, env)
            check_reply(label, argv, rc, out, err, want)
            if i >= warmup:
                res[label]["times"].append(t)
                res[label]["floor"].append(tf)
                res[floor[0]]["times"].append(tf)
    return res


def fast_calls(binaries, floor, runs, scratch):
    """binaries: [(name, path)], e.g. [("static", build/static/loop), ("dynamic", build/loop)]."""
    env = scratch_env(scratch)
    opts = go_json(OPTS)
    # the kernel path needs the image to exist: it is opened and the loop
    # devices were checked for it; since issue 10 isattached is lexical, attached:true)
    with open(os.path.join(scratch, "loop", OPTS["file"]), "wb") as f:
        f.truncate(64 << 20)
    subjects = [("floor (static, write only)", [floor], "Success")]
    for name, loop in binaries:
        subjects += [
            (f"{name}: init", [loop, "init"], "Success"),
            (f"{name}: getvolumename", [loop, "getvolumename", opts], "Not supported"),
            (f"{name}: frobnicate (unknown op)", [loop, "frobnicate"], "Not supported"),
            (f"{name}: attach (controller)", [loop, "attach", opts, "othernode"], "Success"),
            (f"{name}: isattached, other node", [loop, "isattached", opts, "othernode"],
             "Success"),
            (f"{name}: detach, other node", [loop, "detach", PV, "othernode"], "Success"),
            (f"{name}: isattached, this node", [loop, "isattached", opts, NODE], "Success"),
        ]
    rss_file = os.path.join(scratch, "rss") if have_gnu_time() else None
    raw = interleaved(subjects, env, runs)
    results = []
    for label, argv, want in subjects:
        rss = []
        for _ in range(min(runs, RSS_RUNS) if rss_file else 0):
            _, m, rc, out, err = spawn(argv, env, rss_file)
            check_reply(label, argv, rc, out, err, want)
            rss.append(m)
        s = stats(raw[label]["times"], rss)
        if raw[label]["floor"]:
            s["paired"] = statistics.median(
                t / f for t, f in zip(raw[label]["times"], raw[label]["floor"]))
        results.append((label, s))
    # sanity: the two isattached paths answer what they should
    for _, loop in binaries:
        _, _, rc, out, err = spawn([loop, "isattached", opts, "othernode"], env)
        if json.loads(out).get("attached") is not True:
            raise BenchError(f"isattached for another node: want attached:true, got {out!r}")
        _, _, rc, out, err = spawn([loop, "isattached", opts, NODE], env)
        # the logical attach (issue 10): true on every node, the kernel is not asked
        if json.loads(out).get("attached") is not True:
            raise BenchError(f"isattached for this node: want attached:true, got {out!r}")
    os.unlink(os.path.join(scratch, "loop", OPTS["file"]))
    return results


# --- the lifecycle, run inside the private mount namespace ----------------------

def kubelet_paths(scratch):
    kubelet = os.path.join(scratch, "kubelet")
    gmount = os.path.join(kubelet, "plugins/kubernetes.io/flexvolume/flexvol/loop/mounts", PV)
    poddir = os.path.join(kubelet, "pods", POD_UID, "volumes/flexvol~loop", PV)
    # kubelet creates both directories before mountdevice/mount (contract §4.1)
    os.makedirs(poddir, exist_ok=True)
    os.makedirs(gmount, exist_ok=True)
    return gmount, poddir


def one_cycle(loop, env, scratch, gmount, poddir, label, rss_file=None, fail_after=None):
    """attach .. detach once; returns ({op: seconds}, {op: maxrss})."""
    opts, pod_opts = go_json(OPTS), go_json(POD_OPTS)
    device = None
    times, rss = {}, {}
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
        t, m, rc, out, err = spawn(argv, env, rss_file)
        doc = check_reply(label, argv, rc, out, err, "Success")
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
        if op == fail_after:
            raise BenchError(f"--fail-after {op}: stopping here to test the cleanup")
        times[op] = t
        rss[op] = m
    if os.path.isdir(poddir) and os.listdir(poddir):
        raise BenchError(f"{label}: pod dir not empty after unmount: {poddir}")
    if loops_backed_by(scratch):
        raise BenchError(f"{label}: a loop device is still bound after detach: "
                         f"{loops_backed_by(scratch)}")
    return times, rss


def undo_inner(scratch, gmount, poddir):
    # undo whatever a failed run left, in this namespace
    for d in (poddir, gmount):
        for _ in range(4):
            if subprocess.run(["mountpoint", "-q", d]).returncode != 0:
                break
            subprocess.run(["umount", "-l", d], capture_output=True)
    detach_loops(scratch)


READY_RE = re.compile(r"device /dev/loop\d+ ready after (\d+) ms")


def ready_times(log, offset):
    """The driver's own "device /dev/loopN ready after N ms" figures after @offset."""
    try:
        with open(log, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    return [int(m.group(1)) for m in READY_RE.finditer(text)]


def log_size(log):
    try:
        return os.path.getsize(log)
    except OSError:
        return 0


def lifecycle_inner(args):
    """Runs as `unshare -m --propagation private -- bench.py --lifecycle-inner`."""
    scratch = args.scratch
    loop = args.loop
    env = scratch_env(scratch)
    gmount, poddir = kubelet_paths(scratch)
    try:
        if args.cycle_phase:
            result = scale_phase(args, loop, env, gmount, poddir)
        else:
            result = lifecycle_runs(args, loop, env, gmount, poddir)
        with open(args.result, "w") as f:
            json.dump(result, f)
        return 0
    except BenchError as e:
        print(f"bench: FAILED: {e}", file=sys.stderr)
        return 1
    finally:
        undo_inner(scratch, gmount, poddir)


def lifecycle_runs(args, loop, env, gmount, poddir):
    scratch = args.scratch
    per_op = {op: [] for op in LIFECYCLE}
    rss = {op: [] for op in LIFECYCLE}
    totals, first = [], {}
    rss_file = os.path.join(scratch, "rss") if have_gnu_time() else None
    timed = args.lifecycle_runs  # run 0 creates and formats the image
    rss_runs = LIFECYCLE_RSS_RUNS if rss_file else 0
    for i in range(timed + rss_runs):
        under_time = i >= timed
        times, m = one_cycle(loop, env, scratch, gmount, poddir, f"lifecycle run {i + 1}",
                             rss_file if under_time else None, args.fail_after)
        for op in LIFECYCLE:
            if under_time:
                rss[op].append(m[op])
            elif i == 0:
                first[op] = times[op] * 1000
            else:
                per_op[op].append(times[op])
        if 0 < i < timed:
            totals.append(sum(times.values()))
    result = {"first": first, "ops": {}, "total": None}
    if totals:
        for op in LIFECYCLE:
            result["ops"][op] = stats(per_op[op], rss[op])
        result["total"] = stats(totals, [])
    return result


def scale_phase(args, loop, env, gmount, poddir):
    """One point of the scale series: floor, cycle, floor, cycle, ..."""
    scratch = args.scratch
    log = env["FLEXVOL_LOG_FILE"]
    floor = [args.floor]
    # an untimed first cycle (it creates and formats the image the first time)
    one_cycle(loop, env, scratch, gmount, poddir, f"{args.cycle_phase}: warm-up")
    off = log_size(log)
    cycles, floors, wfa = [], [], []
    for i in range(args.lifecycle_runs):
        tf, _, rc, out, err = spawn(floor, env)
        check_reply("floor", floor, rc, out, err, "Success")
        times, _ = one_cycle(loop, env, scratch, gmount, poddir,
                             f"{args.cycle_phase}: cycle {i + 1}")
        floors.append(tf)
        cycles.append(sum(times.values()))
        wfa.append(times["waitforattach"])
    # raw seconds: the outer process pools the rounds
    return {"cycle": cycles, "floor": floors, "waitforattach": wfa,
            "ready": ready_times(log, off)}


def run_inner(args, loop, floor, scratch, runs, phase=None, fail_after=None):
    result = os.path.join(scratch, "inner.json")
    cmd = ["unshare", "-m", "--propagation", "private", "--", sys.executable,
           os.path.abspath(__file__), "--lifecycle-inner", "--loop", loop, "--floor", floor,
           "--scratch", scratch, "--lifecycle-runs", str(runs), "--result", result]
    if phase:
        cmd += ["--cycle-phase", phase]
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
        return json.load(f)


def can_lifecycle():
    if os.geteuid() != 0:
        return "needs root (loop devices, mounts)"
    if not os.path.exists("/dev/loop-control") or not shutil.which("unshare"):
        return "no /dev/loop-control or unshare"
    return None


def lifecycle(args, loop, floor, runs, scratch, fail_after=None):
    why = can_lifecycle()
    if why:
        return None, why
    return run_inner(args, loop, floor, scratch, runs, fail_after=fail_after), None


# --- the scale series: extra free loop devices ---------------------------------

LOOP_CTL_ADD = 0x4C80
LOOP_CTL_REMOVE = 0x4C81
# Far above what LOOP_CTL_GET_FREE hands out on a normal node, so that
# other users of the machine keep getting their usual low numbers.
EXTRA_BASE = 200000


def extra_base(n):
    """EXTRA_BASE, or lower when loop's minors run out first (max_part: 20-bit
    minors shared by each device's partitions)."""
    try:
        with open("/sys/module/loop/parameters/max_part") as f:
            max_part = int(f.read().strip() or 0)
    except (OSError, ValueError):
        max_part = 0
    shift = max_part.bit_length() if max_part > 0 else 0
    return min(EXTRA_BASE, (((1 << 20) - 1) >> shift) - n - 16)


class ExtraLoops:
    """Free loop devices made with LOOP_CTL_ADD, removed again by number."""

    def __init__(self, most):
        self.fd = os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC)
        self.added = []
        self.base = extra_base(most)

    def grow_to(self, n):
        nr = self.added[-1] + 1 if self.added else self.base
        while len(self.added) < n:
            try:
                fcntl.ioctl(self.fd, LOOP_CTL_ADD, nr)
                self.added.append(nr)
            except OSError as e:
                if e.errno != errno.EEXIST:
                    raise BenchError(f"LOOP_CTL_ADD {nr}: {e.strerror}")
            nr += 1

    def remove_one(self, nr):
        """None when gone, else the errno."""
        try:
            fcntl.ioctl(self.fd, LOOP_CTL_REMOVE, nr)
        except OSError as e:
            return None if e.errno == errno.ENODEV else e.errno
        return None

    def shrink_to(self, n, patience=5.0):
        """Remove the devices we added beyond the first @n; one that someone
        bound meanwhile is retried until @patience runs out.  Returns those left.

        A removal waits for the block layer (RCU grace periods, about 50 ms
        each here), so they run 16 at a time: 1,000 take 5 s, not 50 s.
        """
        deadline = time.monotonic() + patience
        keep, left = self.added[:n], self.added[n:]
        while left:
            with concurrent.futures.ThreadPoolExecutor(16) as pool:
                errs = list(pool.map(self.remove_one, left))
            left = [nr for nr, e in zip(left, errs) if e is not None]
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self.added = keep + left
        return left

    def remove_all(self):
        return self.shrink_to(0)

    def close(self):
        os.close(self.fd)


def scale_series(args, loop, floor, scratch, extras):
    why = can_lifecycle()
    if why:
        return None, why
    before = sum(1 for n in os.listdir("/sys/block") if n.startswith("loop"))
    out = []
    xl = ExtraLoops(max(extras))
    old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}

    def on_signal(sig, frame):
        raise BenchError(f"signal {sig}")

    for s in old:
        signal.signal(s, on_signal)
    try:
        for rnd in range(args.scale_rounds):
            # up, down, up, ...: a load that drifts during the series hits
            # every point alike
            for n in extras if rnd % 2 == 0 else extras[::-1]:
                if n >= len(xl.added):
                    xl.grow_to(n)
                elif xl.shrink_to(n):
                    raise BenchError(f"could not remove loop devices {xl.added[n:]} (in use "
                                     f"by someone else?)")
                r = run_inner(args, loop, floor, scratch, args.scale_runs,
                              phase=f"round {rnd + 1}, +{n}")
                r["loops"] = sum(1 for x in os.listdir("/sys/block") if x.startswith("loop"))
                out.append((n, r))
    finally:
        left = xl.remove_all()
        xl.close()
        for s, h in old.items():
            signal.signal(s, h)
        if left:
            print(f"bench: could not remove loop devices {left} (in use by someone else?)",
                  file=sys.stderr)
    series = []
    for n in extras:
        rs = [r for k, r in out if k == n]
        ready = sum((r["ready"] for r in rs), [])
        series.append({
            "extra": n, "loops": max(r["loops"] for r in rs),
            "cycle": stats(sum((r["cycle"] for r in rs), []), []),
            "floor": stats(sum((r["floor"] for r in rs), []), []),
            "waitforattach": stats(sum((r["waitforattach"] for r in rs), []), []),
            "ready_ms": {"runs": len(ready), "median": statistics.median(ready) if ready else None,
                         "max": max(ready) if ready else None}})
    after = sum(1 for n in os.listdir("/sys/block") if n.startswith("loop"))
    return {"series": series, "rounds": args.scale_rounds, "loops_before": before,
            "loops_after": after}, None


# --- output -----------------------------------------------------------------------

def print_table(results, floor):
    fl = floor["median"]
    fr = floor["rss"] or 1
    print(f"{'call':<36} {'runs':>5} {'mean ms':>8} {'median':>8} {'p95':>8} "
          f"{'x floor':>8} {'paired':>7} {'maxRSS KiB':>11} {'x floor':>8}")
    print("-" * 108)
    for label, s in results:
        paired = f"{s['paired']:>7.2f}" if "paired" in s else f"{'':>7}"
        print(f"{label:<36} {s['runs']:>5} {s['mean']:>8.3f} {s['median']:>8.3f} {s['p95']:>8.3f} "
              f"{s['median'] / fl:>8.2f} {paired} {s['rss']:>11} {s['rss'] / fr:>8.2f}")


def print_lifecycle(lc, floor, which):
    fl = floor["median"]
    fr = floor["rss"] or 1
    n = lc["total"]["runs"] if lc["total"] else 0
    print()
    print(f"loop lifecycle ({which}) on a 64Mi ext4 image, private mount namespace, {n} runs "
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


def print_scale(sc, which):
    series = sc["series"]
    base = series[0]
    print()
    print(f"scale ({which}): attach cycle of an existing 64Mi image (7 calls, private mount "
          f"namespace) with extra free loop devices,\n{sc['rounds']} rounds of "
          f"+{', +'.join(str(r['extra']) for r in series)} (up, then down, ...); "
          f"loop devices before {sc['loops_before']}, after {sc['loops_after']}")
    print(f"{'extra loops':<12} {'loops':>6} {'runs':>5} {'cycle ms':>9} {'x +0':>6} "
          f"{'floor ms':>9} {'cycle/floor':>12} {'x +0':>6} {'wait ms':>8} {'ready ms':>9} "
          f"{'max':>5}")
    print("-" * 98)
    b_norm = base["cycle"]["median"] / base["floor"]["median"]
    for r in series:
        c, f = r["cycle"], r["floor"]
        norm = c["median"] / f["median"]
        rd = r["ready_ms"]
        print(f"{'+' + str(r['extra']):<12} {r['loops']:>6} {c['runs']:>5} {c['median']:>9.2f} "
              f"{c['median'] / base['cycle']['median']:>6.2f} {f['median']:>9.3f} "
              f"{norm:>12.1f} {norm / b_norm:>6.2f} {r['waitforattach']['median']:>8.2f} "
              f"{rd['median'] if rd['median'] is not None else '-':>9} "
              f"{rd['max'] if rd['max'] is not None else '-':>5}")
    print("(medians; 'x +0' is against the first row; 'wait ms' is the whole waitforattach call, "
          "'ready ms' the driver's own\n \"device /dev/loopN ready after N ms\" log figure, "
          "median and max)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="build directory (loop, floor)")
    ap.add_argument("--static", metavar="DIR",
                    help="the static build (default BUILD/static when it holds loop)")
    ap.add_argument("--runs", type=int, default=300, help="runs per fast call (default 300)")
    ap.add_argument("--lifecycle-runs", type=int, default=20,
                    help="lifecycle runs, after a first one that formats (default 20)")
    ap.add_argument("--scale-runs", type=int, default=10,
                    help="attach cycles per point and round of the scale series (default 10)")
    ap.add_argument("--scale-rounds", type=int, default=3,
                    help="rounds of the scale series, devices removed after each (default 3)")
    ap.add_argument("--scale", default="0,250,1000",
                    help="extra free loop devices per point (default 0,250,1000; '' skips)")
    ap.add_argument("--no-lifecycle", action="store_true",
                    help="only the per-call table (no lifecycle, no scale series)")
    ap.add_argument("--json", metavar="FILE", help="also write the numbers as JSON")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--lifecycle-inner", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--loop", help=argparse.SUPPRESS)
    ap.add_argument("--floor", help=argparse.SUPPRESS)
    ap.add_argument("--cycle-phase", help=argparse.SUPPRESS)
    ap.add_argument("--scratch", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--fail-after", metavar="OP",
                    help="fail the lifecycle after OP (tests the cleanup)")
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)

    if args.lifecycle_inner:
        return lifecycle_inner(args)
    if args.runs < 1 or args.lifecycle_runs < 0 or args.scale_runs < 1 or args.scale_rounds < 1:
        ap.error("run counts must be positive")
    try:
        extras = [int(x) for x in args.scale.split(",") if x.strip()]
    except ValueError:
        ap.error("--scale takes numbers: 0,250,1000")

    loop = os.path.join(args.build, "loop")
    floor = os.path.join(args.build, "floor")
    static_dir = os.path.abspath(args.static) if args.static else \
        os.path.join(args.build, "static")
    static = os.path.join(static_dir, "loop")
    for p in (loop, floor) + ((static,) if args.static else ()):
        if not os.access(p, os.X_OK):
            print(f"bench: {p} missing: run `make bench` (or make all static {floor})",
                  file=sys.stderr)
            return 1
    binaries = [("dynamic", loop)]
    if os.access(static, os.X_OK):
        binaries.insert(0, ("static", static))
    shipped_name, shipped = binaries[0]

    scratch = tempfile.mkdtemp(prefix="flexvol-bench-")
    prepare_scratch(scratch)
    rc = 0
    try:
        print(f"flexvol bench: {socket.gethostname()}, kernel {os.uname().release}, "
              f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}, "
              f"{args.runs} runs per call (+5 warm-up), each right after a floor run")
        print()
        results = fast_calls(binaries, floor, args.runs, scratch)
        floor_stats = results[0][1]
        print_table(results, floor_stats)
        print("('x floor': median / floor median; 'paired': median of each run / the floor run "
              "just before it)")
        lc = sc = None
        if args.no_lifecycle:
            why = "--no-lifecycle"
        else:
            lc, why = lifecycle(args, shipped, floor, args.lifecycle_runs + 1, scratch,
                                args.fail_after)
        if lc:
            print_lifecycle(lc, floor_stats, shipped_name)
        else:
            print(f"\nlifecycle skipped: {why}")
        if lc and extras:
            sc, why = scale_series(args, shipped, floor, scratch, extras)
            if sc:
                print_scale(sc, shipped_name)
            else:
                print(f"\nscale series skipped: {why}")
        print(f"\nload at the end: {os.getloadavg()[0]:.2f}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"calls": dict(results), "lifecycle": lc, "scale": sc}, f, indent=1)
    except BenchError as e:
        print(f"bench: FAILED: {e}", file=sys.stderr)
        rc = 1
    finally:
        rc = release_scratch(scratch, rc, args.keep)
    return rc


if __name__ == "__main__":
    sys.exit(main())
