#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""make bench (bench-csi): the loop volume's node cycle through CSI beside FlexVolume.

One 64Mi ext4 loop volume per path, the same node work both ways:

  FlexVolume  waitforattach + mountdevice, mount, unmount, unmountdevice + detach: one
              process per call (kubelet's exec), timed from spawn to reaped;
  CSI         NodeStageVolume, NodePublishVolume, NodeUnpublishVolume, NodeUnstageVolume
              over one gRPC connection to flexvol-csi (kubelet keeps one), timed by the
              client (tests/csi/csi-call -script) from the request sent to the answer read.

Interleaved (each cycle of a round runs both, which goes first alternates), in a private
mount namespace, the images, state and kubelet directories on a tmpfs there as in cycle.py
(--disk: on the disk under the scratch directory, the run directory with the locks on a tmpfs
as /run is on a node).  Memory: the endpoint's resident set (VmRSS) when it starts and after
every cycle, and its peak (VmHWM); a FlexVolume call's peak resident set (ru_maxrss of
the call, or of a helper it waited for: mkfs, fsck, blkid; nothing stays resident
between calls).  The CSI cycle's floor (issue 41): the kernel's work of the cycle in one
process (tests/bench/kfloor.c: bind, mount, bind mount, two umounts; no mkfs, no fsck) plus
four round trips of an empty call (NodeGetCapabilities over the same kind of connection),
both measured in every cycle of a round beside the cycle itself; the ratio is the median of
the rounds' ratios, every round printed.  Calls at once (issue 37): N NodeStageVolume of distinct volumes, each on a
connection of its own (raw HTTP/2 frames from threads of this script), started together
against the same N one after another (wall time from the first request to the last answer,
the unstages between untimed), on fresh volumes (each
stage makes its filesystem) and on the same volumes again (a mount).  Nothing here asserts
speed; a failed call fails the run.

  python3 tests/bench/csi.py --build build [--rounds 3] [--cycles 10] [--concurrent 4]
                             [--disk] [--mounts N] [--old BUILD-OLD] [--json out.json]
"""

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402
import cycle as kernelfloor  # noqa: E402  (the kernel floor: its image, its run)

CSI_OPS = ["NodeStageVolume", "NodePublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume"]
# the FlexVolume calls doing the same node work
FLEX_OF = {"NodeStageVolume": ["waitforattach", "mountdevice"], "NodePublishVolume": ["mount"],
           "NodeUnpublishVolume": ["unmount"], "NodeUnstageVolume": ["unmountdevice", "detach"]}
# kfloor's timed kernel operations (its spawn and exit are not the CSI path's)
KFLOOR_OPS = ["bind", "mount", "bindmount", "umount_bind", "umount"]
VID = "pvc-bench"
CAP = {"mount": {"fsType": "ext4"}, "accessMode": {"mode": "SINGLE_NODE_WRITER"}}


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def minflt(pid):
    """The process's minor page faults so far (/proc/PID/stat, field 10)."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


def status_kb(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def flex_cycle(loop, env, gmount, poddir, label):
    """{op: wall ms}, the largest ru_maxrss (KiB) of the calls."""
    opts, pod_opts = bench.go_json(bench.OPTS), bench.go_json(bench.POD_OPTS)
    wall, peak, dev = {}, 0, ""
    for op in ["waitforattach", "mountdevice", "mount", "unmount", "unmountdevice", "detach"]:
        argv = {"waitforattach": [loop, "waitforattach", "loop:bench.img", opts],
                "mountdevice": [loop, "mountdevice", gmount, dev, opts],
                "mount": [loop, "mount", poddir, pod_opts],
                "unmount": [loop, "unmount", poddir],
                "unmountdevice": [loop, "unmountdevice", gmount],
                "detach": [loop, "detach", bench.PV, bench.NODE]}[op]
        t, ru, rc, out, err = bench.spawn_ru(argv, env)
        doc = bench.check_reply(f"flexvolume {label}", argv, rc, out, err, "Success")
        if op == "waitforattach":
            dev = doc.get("device") or ""
        wall[op] = t * 1000
        peak = max(peak, ru.ru_maxrss)
    return wall, peak


def pb_varint(n):
    out = b""
    while True:
        out += bytes([(n & 0x7f) | (0x80 if n > 0x7f else 0)])
        n >>= 7
        if not n:
            return out


def pb_bytes(field, b):
    """a length-delimited protobuf field"""
    b = b.encode() if isinstance(b, str) else b
    return pb_varint(field << 3 | 2) + pb_varint(len(b)) + b


def stage_message(vid, staging):
    """NodeStageVolumeRequest (csi.proto): volume_id 1, staging_target_path 3,
    volume_capability 4 (mount 2 {fs_type 1}, access_mode 3 {mode 1}), volume_context 6"""
    cap = pb_bytes(2, pb_bytes(1, "ext4")) + pb_bytes(3, pb_varint(1 << 3) + pb_varint(1))
    ctx = pb_bytes(1, "file") + pb_bytes(2, vid + ".img")
    return pb_bytes(1, vid) + pb_bytes(3, staging) + pb_bytes(4, cap) + pb_bytes(6, ctx)


def h2_call(sock, path, msg):
    """one unary call on a connection of its own, in raw HTTP/2 frames (literal headers):
    the client side costs the same at once or in series, no process start in it"""
    def fr(t, fl, sid, p):
        return len(p).to_bytes(3, "big") + bytes([t, fl]) + sid.to_bytes(4, "big") + p

    def lit(n, v):
        return b"\0" + bytes([len(n)]) + n.encode() + bytes([len(v)]) + v.encode()

    hdr = b"".join(lit(n, v) for n, v in ((":method", "POST"), (":scheme", "http"),
                                          (":path", path), (":authority", "localhost"),
                                          ("content-type", "application/grpc"),
                                          ("te", "trailers")))
    body = b"\0" + len(msg).to_bytes(4, "big") + msg
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(300)
    s.connect(sock)
    s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + fr(4, 0, 0, b"") + fr(1, 4, 1, hdr) +
              fr(0, 1, 1, body))
    buf, data = b"", False
    try:
        while True:
            while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
                n, t, fl = int.from_bytes(buf[:3], "big"), buf[3], buf[4]
                sid = int.from_bytes(buf[5:9], "big")
                buf = buf[9 + n:]
                if t == 4 and not fl & 1:
                    s.sendall(fr(4, 1, 0, b""))
                data = data or (sid == 1 and t == 0 and n > 0)
                if sid == 1 and t in (0, 1) and fl & 1:
                    return data
                if t == 7 or (sid == 1 and t == 3):
                    return False
            b = s.recv(65536)
            if not b:
                return False
            buf += b
    finally:
        s.close()


def stages(a, sock, msgs, together):
    """wall ms of NodeStageVolume of each of @msgs, each on a connection of its own, all at
    once (@together) or each after the last"""
    def one(m):
        if not h2_call(sock, "/csi.v1.Node/NodeStageVolume", m):
            raise bench.BenchError("CSI NodeStageVolume failed (the endpoint's log says why)")

    t0 = time.monotonic()
    if together:
        errs = []

        def run(m):
            try:
                one(m)
            except Exception as e:  # reported below, from the main thread
                errs.append(e)
        ts = [threading.Thread(target=run, args=(m,)) for m in msgs]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if errs:
            raise errs[0]
    else:
        for m in msgs:
            one(m)
    return (time.monotonic() - t0) * 1000


def at_once(a, sock, staging, script):
    """{"fresh"|"again": {"series"|"together": [ms per round]}}: N stages of distinct volumes"""
    out = {k: {"series": [], "together": []} for k in ("fresh", "again")}
    for rnd in range(a.rounds):
        for order in (("series", "together") if rnd % 2 == 0 else ("together", "series")):
            vids = [f"pvc-bench-{order}-{rnd}-{i}" for i in range(a.concurrent)]
            script([["/csi.v1.Controller/CreateVolume",
                     {"name": v, "capacityRange": {"requiredBytes": str(64 << 20)},
                      "volumeCapabilities": [CAP]}] for v in vids], "create-n")
            reqs = [stage_message(v, staging) for v in vids]
            unstage = [["/csi.v1.Node/NodeUnstageVolume",
                        {"volumeId": v, "stagingTargetPath": staging}] for v in vids]
            for kind in ("fresh", "again"):
                out[kind][order].append(stages(a, sock, reqs, order == "together"))
                script(unstage, "unstage-n")
            script([["/csi.v1.Controller/DeleteVolume", {"volumeId": v}] for v in vids],
                   "delete-n")
    return out


class Endpoint:
    """One flexvol-csi serving loop.csi.flexvol from its own scratch directory, and the node
    cycle of one 64Mi volume through it (tests/csi/csi-call -script: one connection a script)."""

    def __init__(self, a, binary, d):
        self.a, self.d = a, d
        bench.prepare_scratch(d)
        if a.disk:
            bench.run_on_tmpfs(d)
        env = bench.scratch_env(d)
        self.staging = os.path.join(d, "kubelet/plugins/kubernetes.io/csi/loop.csi.flexvol/h/"
                                    "globalmount")
        target = os.path.join(d, "kubelet/pods/p1/volumes/kubernetes.io~csi", VID, "mount")
        os.makedirs(self.staging)
        os.makedirs(os.path.dirname(target))
        self.sock = os.path.join(d, "csi.sock")
        self.log = open(os.path.join(d, "endpoint.log"), "w")
        self.proc = subprocess.Popen([binary, "--endpoint", "unix://" + self.sock, "--driver",
                                      "loop"], env=env, stdout=self.log, stderr=self.log)
        self.cycle = [["/csi.v1.Node/NodeStageVolume",
                       {"volumeId": VID, "stagingTargetPath": self.staging,
                        "volumeCapability": CAP, "volumeContext": {"file": VID + ".img"}}],
                      ["/csi.v1.Node/NodePublishVolume",
                       {"volumeId": VID, "stagingTargetPath": self.staging, "targetPath": target,
                        "volumeCapability": CAP}],
                      ["/csi.v1.Node/NodeUnpublishVolume", {"volumeId": VID, "targetPath": target}],
                      ["/csi.v1.Node/NodeUnstageVolume",
                       {"volumeId": VID, "stagingTargetPath": self.staging}]]

    def ready(self):
        end = time.monotonic() + 10
        while not os.path.exists(self.sock):
            if time.monotonic() > end or self.proc.poll() is not None:
                raise bench.BenchError("flexvol-csi did not listen")
            time.sleep(0.02)
        time.sleep(0.2)

    def script(self, calls, name):
        f = os.path.join(self.d, name + ".json")
        with open(f, "w") as fh:
            json.dump(calls, fh)
        r = subprocess.run([self.a.call, "-endpoint", "unix://" + self.sock, "-script", f],
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise bench.BenchError(f"CSI {name}: {r.stderr.strip()}")
        return json.loads(r.stdout)

    def create(self):
        self.script([["/csi.v1.Controller/CreateVolume",
                      {"name": VID, "capacityRange": {"requiredBytes": str(64 << 20)},
                       "volumeCapabilities": [CAP]}]], "create")

    def run_cycle(self):
        return dict(zip(CSI_OPS, self.script(self.cycle, "cycle")))

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)
        self.log.close()
        bench.undo_inner(self.d, *bench.kubelet_paths(self.d))
        if self.a.disk:
            bench.undo_run_tmpfs(self.d)


def inner(a):
    scratch = a.scratch
    if not a.disk:  # as cycle.py: the kernel's work and ours, not a shared disk's latency
        scratch = os.path.join(a.scratch, "fs")
        os.makedirs(scratch, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512m,mode=0700", "flexvol-bench",
                        scratch], check=True)
    bench.busy_node(a.scratch, a.mounts)
    flex = os.path.join(scratch, "flex")
    bench.prepare_scratch(flex)
    if a.disk:
        bench.run_on_tmpfs(flex)
    fenv = bench.scratch_env(flex)
    gmount, poddir = bench.kubelet_paths(flex)
    eps = []
    result = {"rounds": []}
    try:
        new = Endpoint(a, a.csi, os.path.join(scratch, "csi"))
        eps.append(new)
        old = Endpoint(a, a.old_csi, os.path.join(scratch, "csi-old")) if a.old_csi else None
        if old:
            eps.append(old)
        for e in eps:
            e.ready()
        result["rss_start_kb"] = status_kb(new.proc.pid, "VmRSS")
        for e in eps:
            e.create()
            e.run_cycle()  # warm-up: mkfs
        flex_cycle(a.loop, fenv, gmount, poddir, "warm-up")
        kf_args = kernelfloor.kfloor_setup(scratch)
        empty = [["/csi.v1.Node/NodeGetCapabilities", {}]] * 4
        rss, faults = [], []
        for rnd in range(a.rounds):
            r = {"csi": [], "csi_old": [], "flex": [], "flex_peak_kb": [], "kfloor": [],
                 "empty": []}
            for i in range(a.cycles):
                for which in (("csi", "flex") if i % 2 == 0 else ("flex", "csi")):
                    if which == "csi":
                        if old and i % 2:
                            r["csi_old"].append(old.run_cycle())
                        f0 = minflt(new.proc.pid)
                        r["csi"].append(new.run_cycle())
                        faults.append(minflt(new.proc.pid) - f0)
                        if old and not i % 2:
                            r["csi_old"].append(old.run_cycle())
                        kf = kernelfloor.run_kfloor(a.kfloor, kf_args, os.environ.copy())
                        r["kfloor"].append(sum(kf[k] for k in KFLOOR_OPS))
                        r["empty"].append(sum(new.script(empty, "empty")))
                        rss.append(status_kb(new.proc.pid, "VmRSS"))
                    else:
                        w, p = flex_cycle(a.loop, fenv, gmount, poddir, f"round {rnd + 1}")
                        r["flex"].append(w)
                        r["flex_peak_kb"].append(p)
            result["rounds"].append(r)
        result["rss_after_kb"] = max(rss)
        result["faults_per_cycle"] = med(faults)
        result["hwm_kb"] = status_kb(new.proc.pid, "VmHWM")
        new.script([["/csi.v1.Controller/DeleteVolume", {"volumeId": VID}]], "delete")
        result["at_once"] = at_once(a, new.sock, new.staging, new.script)
    finally:
        for e in eps:
            e.stop()
        bench.undo_inner(flex, gmount, poddir)
        if a.disk:
            bench.undo_run_tmpfs(flex)
        if not a.disk:
            subprocess.run(["umount", "-l", scratch], capture_output=True)
    with open(a.result, "w") as f:
        json.dump(result, f)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cycles", type=int, default=10)
    ap.add_argument("--concurrent", type=int, default=4, help="stages at once (distinct volumes)")
    ap.add_argument("--mounts", type=int, default=0, metavar="N", help=bench.MOUNTS_HELP)
    ap.add_argument("--disk", action="store_true", help="images and state on the disk under "
                    "the scratch directory, the run directory (locks) on a tmpfs as /run is on a "
                    "node (default: all on a tmpfs)")
    ap.add_argument("--json")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--old", help="build directory of the previous release: its "
                    "static/flexvol-csi (else flexvol-csi) measured beside, interleaved")
    for k in ("loop", "csi", "old-csi", "call", "kfloor", "scratch", "result"):
        ap.add_argument("--" + k, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.inner:
        try:
            return inner(a)
        except bench.BenchError as e:
            print(f"bench-csi: {e}", file=sys.stderr)
            return 1
    if os.geteuid() != 0:
        print("bench-csi: needs root (loop devices, mounts)", file=sys.stderr)
        return 2
    st = os.path.join(a.build, "static")
    loop = os.path.join(st, "loop") if os.path.exists(os.path.join(st, "loop")) else \
        os.path.join(a.build, "loop")
    csi = os.path.join(st, "flexvol-csi") if os.path.exists(os.path.join(st, "flexvol-csi")) else \
        os.path.join(a.build, "flexvol-csi")
    old_csi = None
    if a.old:
        old_csi = os.path.join(a.old, "static", "flexvol-csi")
        if not os.path.exists(old_csi):
            old_csi = os.path.join(a.old, "flexvol-csi")
    sanity = subprocess.run([os.path.join(HERE, "..", "csi", "build")], check=True,
                            stdout=subprocess.PIPE, text=True).stdout.strip().splitlines()[-1]
    call = os.path.join(os.path.dirname(sanity), "csi-call")
    scratch = tempfile.mkdtemp(prefix="flexvol-bench-csi.")
    result = os.path.join(scratch, "result.json")
    rc = subprocess.run(["unshare", "-m", "--propagation", "private", "--", sys.executable,
                         os.path.abspath(__file__), "--inner", "--loop", os.path.abspath(loop),
                         "--csi", os.path.abspath(csi), "--call", call, "--scratch", scratch,
                         "--kfloor", os.path.abspath(os.path.join(a.build, "kfloor")),
                         "--result", result, "--rounds", str(a.rounds),
                         "--cycles", str(a.cycles)] + (["--disk"] if a.disk else []) +
                        (["--old-csi", os.path.abspath(old_csi)] if a.old else []) + [
                         "--concurrent", str(a.concurrent), "--mounts", str(a.mounts)]).returncode
    if rc == 0:
        with open(result) as f:
            res = json.load(f)
        where = ("on the disk, locks on a tmpfs" if a.disk else "on a tmpfs") + (
            f", {a.mounts} more mounts" if a.mounts else "")
        print(f"CSI beside FlexVolume, loop 64Mi ext4 (flexvol-csi: {csi}; loop: {loop}), "
              f"images and state {where}; median ms over {a.rounds} rounds x {a.cycles} cycles "
              f"(each round's median)")
        print(f"{'CSI call':<22}{'CSI':>9}  {'FlexVolume call(s)':<28}{'FlexVolume':>11}")
        tot_c, tot_f = [], []
        for op in CSI_OPS:
            c = med([med([cy[op] for cy in r["csi"]]) for r in res["rounds"]])
            f = med([med([sum(cy[x] for x in FLEX_OF[op]) for cy in r["flex"]])
                     for r in res["rounds"]])
            print(f"{op:<22}{c:>9.1f}  {' + '.join(FLEX_OF[op]):<28}{f:>11.1f}")
        c = med([med([sum(cy.values()) for cy in r["csi"]]) for r in res["rounds"]])
        f = med([med([sum(cy.values()) for cy in r["flex"]]) for r in res["rounds"]])
        print(f"{'the cycle':<22}{c:>9.1f}  {'the six calls':<28}{f:>11.1f}")
        print("the CSI cycle against its floor (the kernel's work in one process + four empty "
              "calls' round trips), each round's medians:")
        ratios = []
        for i, r in enumerate(res["rounds"]):
            cy, kf, em = (med([sum(x.values()) for x in r["csi"]]), med(r["kfloor"]), med(r["empty"]))
            ratios.append(cy / (kf + em))
            print(f"  round {i + 1}: cycle {cy:.2f} ms, kernel {kf:.2f} + four empty calls {em:.2f} "
                  f"= {kf + em:.2f} ms: {ratios[-1]:.2f}x")
        print(f"  median of the rounds' ratios: {med(ratios):.2f}x")
        if a.old:
            print(f"against the previous release ({old_csi}), interleaved: its cycle, each "
                  f"round's median, and new/old:")
            pr = []
            for i, r in enumerate(res["rounds"]):
                cn = med([sum(x.values()) for x in r["csi"]])
                co = med([sum(x.values()) for x in r["csi_old"]])
                kf, em = med(r["kfloor"]), med(r["empty"])
                pr.append(cn / co)
                print(f"  round {i + 1}: old {co:.2f} ms ({co / (kf + em):.2f}x its floor), "
                      f"new {cn:.2f} ms: new/old {cn / co:.2f}; per call old/new: " + ", ".join(
                          f"{op[4:-6]} {med([x[op] for x in r['csi_old']]):.2f}/"
                          f"{med([x[op] for x in r['csi']]):.2f}" for op in CSI_OPS))
            print(f"  median new/old: {med(pr):.2f}")
        peak = max(p for r in res["rounds"] for p in r["flex_peak_kb"])
        print(f"memory: flexvol-csi resident {res['rss_start_kb']} KiB at start, "
              f"{res['rss_after_kb']} KiB at most after a cycle, peak {res['hwm_kb']} KiB; "
              f"a FlexVolume call's peak {peak} KiB (the call or a helper it waited for, "
              f"ru_maxrss; nothing resident between calls); the endpoint's page faults in a "
              f"cycle: {res['faults_per_cycle']:.0f} (median)")
        print(f"{a.concurrent} NodeStageVolume of distinct volumes, a connection each; median wall "
              f"ms of {a.rounds} rounds:")
        for kind, what in (("fresh", "fresh volumes (mkfs)"), ("again", "formatted (mount)")):
            se, to = (med(res["at_once"][kind][k]) for k in ("series", "together"))
            print(f"  {what:<22} one after another {se:>8.1f}   at once {to:>8.1f}   "
                  f"({se / to:.2f}x)")
        if a.json:
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1)
    return bench.release_scratch(scratch, rc)


if __name__ == "__main__":
    sys.exit(main())
