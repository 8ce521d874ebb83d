#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""make bench: the loop attach cycle per op, next to its floors and the previous release.

The cycle kubelet drives on a node for one pod of an existing 64Mi ext4 image
(waitforattach, mountdevice, mount, unmount, unmountdevice, detach), timed per
call from spawn to reaped, next to:

  * the exec floor: tests/bench/floor.c, a static program that only writes one
    JSON reply (what any driver call pays before doing anything);
  * the kernel floor: tests/bench/kfloor.c, one static program doing the
    cycle's kernel operations without the driver (bind, mount, bind-mount,
    the two umounts, the release), each step timed inside it;
  * the previous release (--old DIR: a build directory holding its loop
    driver), on its own image, in the same run.

The static builds are measured (BUILD/static/loop against DIR/static/loop:
what ships; `make static`), each with its dynamic build beside it when
--dynamic asks (BUILD/loop, DIR/loop: the same interleaving, two more
subjects).  The images, state and kubelet directories live on a tmpfs
mounted in the private mount namespace (--disk: on the disk under the
scratch directory instead, the run directory with the locks on a tmpfs as
/run is on a node), so that the figures are the drivers' and the
kernel's work, not the latency of a disk other programs share; on a node
the state records' fsync and the loop device's flushes go to its disk.
--mounts N adds N small tmpfs mounts to the namespace first, as a node with
pods has (each pod brings a few: its secrets, tokens, volumes): the kernel
writes /proc/self/mountinfo at some 2 us a mount, and the drivers read it.

Interleaved: each cycle of a round runs the exec floor, the kernel floor, then
the two drivers' cycles (which goes first alternates), so a load that comes
and goes on a shared machine hits all alike.  Every round's medians are
printed; the summary is the median over the rounds, and the ratio to the old
release the median of the rounds' paired ratios (this round's median over
the old release's median of the same round).  Nothing here asserts speed; a
reply other than Success fails the run (exit 1).

  python3 tests/bench/cycle.py --build build [--loop build/static/loop]
          [--old build-old] [--dynamic] [--disk] [--mounts N] [--rounds 5] [--cycles 10]
          [--json out.json]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

OPS = ["waitforattach", "mountdevice", "mount", "unmount", "unmountdevice", "detach"]
KFLOOR = {"waitforattach": "bind", "mountdevice": "mount", "mount": "bindmount",
          "unmount": "umount_bind", "unmountdevice": "umount"}
TARGETS = {"unmountdevice": 5.0, "mountdevice": 12.0}
CYCLE_FLOORS = 2.5  # the whole cycle against six exec floors
# issue 41: the whole cycle against its physical floor, six exec floors plus the kernel's steps
# of the cycle (kfloor's timed steps, not its own start)
PHYS_FLOOR = 1.3


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def spawn(argv, env):
    """Run argv once: (wall ms, CPU ms of the child: user + system), exit status, stdout, stderr."""
    t, ru, rc, out, err = bench.spawn_ru(argv, env)
    return t * 1000, (ru.ru_utime + ru.ru_stime) * 1000, rc, out, err


class Subject:
    """One driver build with its own scratch directory (image, state, kubelet dirs)."""

    def __init__(self, name, loop, scratch):
        self.name, self.loop, self.scratch = name, loop, scratch
        self.env = bench.scratch_env(scratch)
        self.gmount, self.poddir = bench.kubelet_paths(scratch)

    def cycle(self, label):
        """One cycle: {op: wall ms}, {op: CPU ms}."""
        opts, pod_opts = bench.go_json(bench.OPTS), bench.go_json(bench.POD_OPTS)
        argvs = {
            "waitforattach": lambda dev: [self.loop, "waitforattach", "loop:bench.img", opts],
            "mountdevice": lambda dev: [self.loop, "mountdevice", self.gmount, dev, opts],
            "mount": lambda dev: [self.loop, "mount", self.poddir, pod_opts],
            "unmount": lambda dev: [self.loop, "unmount", self.poddir],
            "unmountdevice": lambda dev: [self.loop, "unmountdevice", self.gmount],
            "detach": lambda dev: [self.loop, "detach", bench.PV, bench.NODE],
        }
        wall, cpu, dev = {}, {}, None
        for op in OPS:
            argv = argvs[op](dev)
            wall[op], cpu[op], rc, out, err = spawn(argv, self.env)
            doc = bench.check_reply(f"{self.name}: {label}", argv, rc, out, err, "Success")
            if op == "waitforattach":
                dev = doc.get("device") or ""
                if not dev.startswith("/dev/loop"):
                    raise bench.BenchError(f"waitforattach returned device {dev!r}")
        for d in (self.gmount, self.poddir):
            if os.path.ismount(d):
                raise bench.BenchError(f"{self.name}: {label}: {d} still mounted after the cycle")
        if bench.loops_backed_by(self.scratch):
            raise bench.BenchError(f"{self.name}: {label}: a loop device is still bound after "
                                   f"detach: {bench.loops_backed_by(self.scratch)}")
        return wall, cpu


def kfloor_setup(scratch):
    img = os.path.join(scratch, "kfloor.img")
    with open(img, "wb") as f:
        f.truncate(64 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", img], check=True)
    gmp, pod = os.path.join(scratch, "kf-gmp"), os.path.join(scratch, "kf-pod")
    os.makedirs(gmp, exist_ok=True)
    os.makedirs(pod, exist_ok=True)
    return [img, gmp, pod]


def run_kfloor(kfloor, args, env):
    t, c, rc, out, err = spawn([kfloor] + args, env)
    doc = bench.check_reply("kernel floor", [kfloor] + args, rc, out, err, "Success")
    doc["total"], doc["cpu"] = t, c
    return doc


def subject_list(args):
    """(name, driver) in the order of the tables: new, old, then their dynamic builds."""
    subs = [("new", args.loop)] + ([("old", args.old_loop)] if args.old_loop else [])
    if args.dyn_loop:
        subs.append(("dyn-new", args.dyn_loop))
        if args.dyn_old_loop:
            subs.append(("dyn-old", args.dyn_old_loop))
    return subs


def inner(args):
    """In the private mount namespace: every round, every cycle, as raw milliseconds."""
    subjects = []
    base = args.scratch
    if not args.disk:
        base = os.path.join(args.scratch, "fs")
        os.makedirs(base, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512m,mode=0700", "flexvol-bench",
                        base], check=True)
    bench.busy_node(args.scratch, args.mounts)
    for name, loop in subject_list(args):
        d = os.path.join(base, name)
        bench.prepare_scratch(d)
        if args.disk:
            bench.run_on_tmpfs(d)
        subjects.append(Subject(name, loop, d))
    kf_args = kfloor_setup(base)
    env = bench.scratch_env(args.scratch)
    rounds = []
    try:
        for s in subjects:
            s.cycle("warm-up")  # creates and formats the image
        run_kfloor(args.kfloor, kf_args, env)
        for rnd in range(args.rounds):
            r = {"floor": [], "floor_cpu": [], "kfloor": [],
                 **{s.name: [] for s in subjects}, **{s.name + "_cpu": [] for s in subjects}}
            for i in range(args.cycles):
                t, c, rc, out, err = spawn([args.floor], env)
                bench.check_reply("floor", [args.floor], rc, out, err, "Success")
                r["floor"].append(t)
                r["floor_cpu"].append(c)
                r["kfloor"].append(run_kfloor(args.kfloor, kf_args, env))
                for s in (subjects if i % 2 == 0 else subjects[::-1]):
                    wall, cpu = s.cycle(f"round {rnd + 1}, cycle {i + 1}")
                    r[s.name].append(wall)
                    r[s.name + "_cpu"].append(cpu)
            rounds.append(r)
    except bench.BenchError as e:
        print(f"bench: FAILED: {e}", file=sys.stderr)
        return 1
    finally:
        for s in subjects:
            bench.undo_inner(s.scratch, s.gmount, s.poddir)
            if args.disk:
                bench.undo_run_tmpfs(s.scratch)
        if not args.disk:
            subprocess.run(["umount", "-l", base], capture_output=True)
    with open(args.result, "w") as f:
        json.dump(rounds, f)
    return 0


def summarize(rounds, names):
    """Per round: medians per op and cycle for each subject, the floors, the paired ratio."""
    per_round = []
    for r in rounds:
        row = {"floor": med(r["floor"]), "kfloor": med([k["total"] for k in r["kfloor"]]),
               "kparts": {p: med([k[p] for k in r["kfloor"]]) for p in KFLOOR.values()}}
        row["floor_cpu"] = med(r["floor_cpu"])
        row["kfloor_cpu"] = med([k["cpu"] for k in r["kfloor"]])
        for n in names:
            row[n] = {op: med([c[op] for c in r[n]]) for op in OPS}
            row[n]["cycle"] = med([sum(c[op] for op in OPS) for c in r[n]])
            row[n + "_cpu"] = {op: med([c[op] for c in r[n + "_cpu"]]) for op in OPS}
            row[n + "_cpu"]["cycle"] = med([sum(c[op] for op in OPS) for c in r[n + "_cpu"]])
        if "old" in names:
            row["ratio"] = {op: row["new"][op] / row["old"][op] for op in OPS + ["cycle"]}
        if "dyn-old" in names:
            row["dyn-ratio"] = {op: row["dyn-new"][op] / row["dyn-old"][op]
                                for op in OPS + ["cycle"]}
        per_round.append(row)
    return per_round


def print_report(per_round, names, args):
    cols = OPS + ["cycle"]
    short = {"waitforattach": "wfa", "mountdevice": "mntdev", "mount": "mount",
             "unmount": "umount", "unmountdevice": "umntdev", "detach": "detach",
             "cycle": "cycle"}
    print(f"loop attach cycle per op (ms, medians of {args.cycles} cycles per round; "
          f"new = {args.loop}" + (f", old = {args.old_loop}" if args.old_loop else "") +
          (f", dyn-new = {args.dyn_loop}" if args.dyn_loop else "") +
          (f", dyn-old = {args.dyn_old_loop}" if args.dyn_old_loop else "") + ")")
    head = f"{'round':<6} {'floor':>6} {'kfloor':>7} " + " ".join(
        f"{n + ':' + short[op]:>12}" for n in names for op in cols)
    print(head)
    print("-" * len(head))
    for i, row in enumerate(per_round):
        print(f"{i + 1:<6} {row['floor']:>6.2f} {row['kfloor']:>7.2f} " + " ".join(
            f"{row[n][op]:>12.2f}" for n in names for op in cols))
    if "old" in names:
        print("paired ratio new/old per round:")
        for i, row in enumerate(per_round):
            print(f"  round {i + 1}: " + "  ".join(
                f"{short[op]} {row['ratio'][op]:.2f}" for op in cols))
    if "dyn-old" in names:
        print("paired ratio dyn-new/dyn-old per round (the dynamic builds):")
        for i, row in enumerate(per_round):
            print(f"  round {i + 1}: " + "  ".join(
                f"{short[op]} {row['dyn-ratio'][op]:.2f}" for op in cols))
    floor = med([r["floor"] for r in per_round])
    print()
    print(f"summary over {len(per_round)} rounds (median of the rounds' medians; 'new/old' the "
          f"median of the paired ratios; CPU: user + system of the call)")
    old = "old" in names
    hdr = (f"{'op':<15} {'new ms':>8} " + (f"{'old ms':>8} {'new/old':>8} " if old else "") +
           f"{'new CPU':>8} " + (f"{'old CPU':>8} " if old else "") +
           f"{'kernel floor':>13} {'target':>10}")
    width = len(hdr) + 9  # then "  met" or "  NOT met"
    # the dynamic builds, when measured too: their medians and paired ratio, and CPU
    dyn = [n for n in ("dyn-new", "dyn-old") if n in names]
    if dyn:
        hdr = f"{hdr:<{width}}" + " ".join(f"{n + ' ms':>11}" for n in dyn) + (
            f" {'dyn new/old':>11}" if "dyn-old" in names else "") + \
            " " + " ".join(f"{n + ' CPU':>11}" for n in dyn)
    print(hdr)
    print("-" * len(hdr))
    for op in cols:
        new = med([r["new"][op] for r in per_round])
        line = f"{op:<15} {new:>8.2f} "
        if old:
            line += (f"{med([r['old'][op] for r in per_round]):>8.2f} "
                     f"{med([r['ratio'][op] for r in per_round]):>8.2f} ")
        line += f"{med([r['new_cpu'][op] for r in per_round]):>8.2f} "
        if old:
            line += f"{med([r['old_cpu'][op] for r in per_round]):>8.2f} "
        if op == "cycle":
            kf = med([r["kfloor"] for r in per_round])
            tgt = f"<= {CYCLE_FLOORS * 6 * floor:.1f}"
            ok = new <= CYCLE_FLOORS * 6 * floor
        else:
            kf = med([r["kparts"][KFLOOR[op]] for r in per_round]) if op in KFLOOR else 0.0
            tgt = f"<= {TARGETS[op]:.1f}" if op in TARGETS else ""
            ok = new <= TARGETS[op] if op in TARGETS else None
        line += f"{kf:>13.2f} {tgt:>10}"
        if ok is not None:
            line += "  met" if ok else "  NOT met"
        if dyn:
            line = f"{line:<{width}}" + " ".join(
                f"{med([r[n][op] for r in per_round]):>11.2f}" for n in dyn)
            if "dyn-old" in names:
                line += f" {med([r['dyn-ratio'][op] for r in per_round]):>11.2f}"
            line += " " + " ".join(f"{med([r[n + '_cpu'][op] for r in per_round]):>11.2f}"
                                   for n in dyn)
        print(line)
    print(f"exec floor {floor:.2f} ms (CPU {med([r['floor_cpu'] for r in per_round]):.2f}; six: "
          f"{6 * floor:.2f}); kernel floor, one process for every step: "
          f"{med([r['kfloor'] for r in per_round]):.2f} ms (CPU "
          f"{med([r['kfloor_cpu'] for r in per_round]):.2f}); cycle / six exec floors: "
          + ", ".join(f"{n} {med([r[n]['cycle'] / (6 * r['floor']) for r in per_round]):.2f}"
                      for n in names))
    print("(kernel floor per op: the step's time inside kfloor: bind, mount, bind-mount, the pod's "
          "umount, the device's umount with the release)")
    print(f"cycle / (six exec floors + the kernel's steps), each round (target <= {PHYS_FLOOR}):")
    for n in names:
        rs = [r[n]["cycle"] / (6 * r["floor"] + sum(r["kparts"].values())) for r in per_round]
        print(f"  {n}: " + "  ".join(f"{x:.2f}" for x in rs) + f"; median {med(rs):.2f}"
              + (f"  {'met' if med(rs) <= PHYS_FLOOR else 'NOT met'}" if n == "new" else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="build directory (floor, kfloor, loop)")
    ap.add_argument("--loop", help="the driver measured (default BUILD/static/loop when it and "
                    "the old release's static build exist, else BUILD/loop)")
    ap.add_argument("--old", metavar="DIR", help="build directory of the previous release "
                    "(DIR/loop, or DIR/static/loop when both are static)")
    ap.add_argument("--dynamic", action="store_true", help="also measure the dynamic builds "
                    "(BUILD/loop, DIR/loop) beside the static ones, interleaved")
    ap.add_argument("--disk", action="store_true", help="keep the images and state on the "
                    "disk under the scratch directory, the run directory (locks) on a tmpfs as "
                    "/run is on a node (default: all on a tmpfs)")
    ap.add_argument("--mounts", type=int, default=0, metavar="N", help=bench.MOUNTS_HELP)
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    ap.add_argument("--cycles", type=int, default=10, help="cycles per round (default 10)")
    ap.add_argument("--json", metavar="FILE", help="also write every round as JSON")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--old-loop", help=argparse.SUPPRESS)
    ap.add_argument("--dyn-loop", help=argparse.SUPPRESS)
    ap.add_argument("--dyn-old-loop", help=argparse.SUPPRESS)
    ap.add_argument("--floor", help=argparse.SUPPRESS)
    ap.add_argument("--kfloor", help=argparse.SUPPRESS)
    ap.add_argument("--scratch", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inner:
        return inner(args)
    if args.rounds < 1 or args.cycles < 1:
        ap.error("--rounds and --cycles must be positive")
    why = bench.can_lifecycle()
    if why:
        print(f"cycle bench skipped: {why}")
        return 0
    b = os.path.abspath(args.build)
    o = os.path.abspath(args.old) if args.old else None
    # static against static (what ships) when both exist, else dynamic against dynamic
    static = all(os.access(os.path.join(d, "static", "loop"), os.X_OK) for d in (b, o) if d)
    sub = os.path.join("static", "loop") if static else "loop"
    loop = os.path.abspath(args.loop) if args.loop else os.path.join(b, sub)
    old_loop = os.path.join(o, sub) if o else None
    dyn_loop = os.path.join(b, "loop") if args.dynamic and static else None
    dyn_old_loop = os.path.join(o, "loop") if dyn_loop and o else None
    floor, kfloor = os.path.join(b, "floor"), os.path.join(b, "kfloor")
    for p in [loop, floor, kfloor] + [x for x in (old_loop, dyn_loop, dyn_old_loop) if x]:
        if not os.access(p, os.X_OK):
            print(f"bench: {p} missing (make {os.path.relpath(floor)} "
                  f"{os.path.relpath(kfloor)}; --old: a build of the previous release)",
                  file=sys.stderr)
            return 1
    args.loop, args.old_loop = loop, old_loop
    args.dyn_loop, args.dyn_old_loop = dyn_loop, dyn_old_loop
    scratch = tempfile.mkdtemp(prefix="flexvol-cycle-")
    result = os.path.join(scratch, "rounds.json")
    cmd = ["unshare", "-m", "--propagation", "private", "--", sys.executable,
           os.path.abspath(__file__), "--inner", "--loop", loop, "--floor", floor,
           "--kfloor", kfloor, "--scratch", scratch, "--result", result,
           "--rounds", str(args.rounds), "--cycles", str(args.cycles),
           "--mounts", str(args.mounts)]
    if old_loop:
        cmd += ["--old-loop", old_loop]
    if dyn_loop:
        cmd += ["--dyn-loop", dyn_loop] + (["--dyn-old-loop", dyn_old_loop] if dyn_old_loop else [])
    if args.disk:
        cmd.append("--disk")
    print(f"flexvol cycle bench: kernel {os.uname().release}, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.2f}, {args.rounds} rounds x {args.cycles} cycles, "
          f"{'static' if static else 'dynamic'} builds, scratch on "
          f"{'the disk' if args.disk else 'a tmpfs'}"
          + (f", {args.mounts} more mounts" if args.mounts else ""))
    rc = 1
    try:
        rc = subprocess.run(cmd).returncode
        if rc == 0:
            with open(result) as f:
                rounds = json.load(f)
            names = [n for n, _ in subject_list(args)]
            per_round = summarize(rounds, names)
            print_report(per_round, names, args)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump({"rounds": rounds, "per_round": per_round}, f, indent=1)
        print(f"load at the end: {os.getloadavg()[0]:.2f}")
    finally:
        rc = bench.release_scratch(scratch, rc)
    return rc


if __name__ == "__main__":
    sys.exit(main())
