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
mount namespace.  Memory: the endpoint's resident set (VmRSS) when it starts and after
every cycle, and its peak (VmHWM); a FlexVolume call's peak resident set (ru_maxrss of
the call, or of a helper it waited for: mkfs, fsck, blkid; nothing stays resident
between calls).  Nothing here asserts speed; a failed
call fails the run.

  python3 tests/bench/csi.py --build build [--rounds 3] [--cycles 10] [--json out.json]
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402

CSI_OPS = ["NodeStageVolume", "NodePublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume"]
# the FlexVolume calls doing the same node work
FLEX_OF = {"NodeStageVolume": ["waitforattach", "mountdevice"], "NodePublishVolume": ["mount"],
           "NodeUnpublishVolume": ["unmount"], "NodeUnstageVolume": ["unmountdevice", "detach"]}
VID = "pvc-bench"
CAP = {"mount": {"fsType": "ext4"}, "accessMode": {"mode": "SINGLE_NODE_WRITER"}}


def med(xs):
    return statistics.median(xs) if xs else float("nan")


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


def inner(a):
    scratch = a.scratch
    flex, csi = os.path.join(scratch, "flex"), os.path.join(scratch, "csi")
    for d in (flex, csi):
        bench.prepare_scratch(d)
    fenv = bench.scratch_env(flex)
    gmount, poddir = bench.kubelet_paths(flex)
    cenv = bench.scratch_env(csi)
    staging = os.path.join(csi, "kubelet/plugins/kubernetes.io/csi/loop.csi.flexvol/h/globalmount")
    target = os.path.join(csi, "kubelet/pods/p1/volumes/kubernetes.io~csi", VID, "mount")
    os.makedirs(staging)
    os.makedirs(os.path.dirname(target))
    sock = os.path.join(csi, "csi.sock")
    log = open(os.path.join(csi, "endpoint.log"), "w")
    proc = subprocess.Popen([a.csi, "--endpoint", "unix://" + sock, "--driver", "loop"], env=cenv,
                            stdout=log, stderr=log)
    result = {"rounds": []}
    try:
        end = time.monotonic() + 10
        while not os.path.exists(sock):
            if time.monotonic() > end or proc.poll() is not None:
                raise bench.BenchError("flexvol-csi did not listen")
            time.sleep(0.02)
        time.sleep(0.2)
        result["rss_start_kb"] = status_kb(proc.pid, "VmRSS")

        def script(calls, name):
            f = os.path.join(csi, name + ".json")
            with open(f, "w") as fh:
                json.dump(calls, fh)
            r = subprocess.run([a.call, "-endpoint", "unix://" + sock, "-script", f],
                               capture_output=True, text=True, timeout=300)
            if r.returncode != 0:
                raise bench.BenchError(f"CSI {name}: {r.stderr.strip()}")
            return json.loads(r.stdout)

        script([["/csi.v1.Controller/CreateVolume",
                 {"name": VID, "capacityRange": {"requiredBytes": str(64 << 20)},
                  "volumeCapabilities": [CAP]}]], "create")
        cycle = [["/csi.v1.Node/NodeStageVolume",
                  {"volumeId": VID, "stagingTargetPath": staging, "volumeCapability": CAP,
                   "volumeContext": {"file": VID + ".img"}}],
                 ["/csi.v1.Node/NodePublishVolume",
                  {"volumeId": VID, "stagingTargetPath": staging, "targetPath": target,
                   "volumeCapability": CAP}],
                 ["/csi.v1.Node/NodeUnpublishVolume", {"volumeId": VID, "targetPath": target}],
                 ["/csi.v1.Node/NodeUnstageVolume", {"volumeId": VID, "stagingTargetPath": staging}]]
        script(cycle, "warm-up")  # mkfs
        flex_cycle(a.loop, fenv, gmount, poddir, "warm-up")
        rss = []
        for rnd in range(a.rounds):
            r = {"csi": [], "flex": [], "flex_peak_kb": []}
            for i in range(a.cycles):
                for which in (("csi", "flex") if i % 2 == 0 else ("flex", "csi")):
                    if which == "csi":
                        r["csi"].append(dict(zip(CSI_OPS, script(cycle, "cycle"))))
                        rss.append(status_kb(proc.pid, "VmRSS"))
                    else:
                        w, p = flex_cycle(a.loop, fenv, gmount, poddir, f"round {rnd + 1}")
                        r["flex"].append(w)
                        r["flex_peak_kb"].append(p)
            result["rounds"].append(r)
        result["rss_after_kb"] = max(rss)
        result["hwm_kb"] = status_kb(proc.pid, "VmHWM")
        script([["/csi.v1.Controller/DeleteVolume", {"volumeId": VID}]], "delete")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()
    with open(a.result, "w") as f:
        json.dump(result, f)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cycles", type=int, default=10)
    ap.add_argument("--json")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    for k in ("loop", "csi", "call", "scratch", "result"):
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
    sanity = subprocess.run([os.path.join(HERE, "..", "csi", "build")], check=True,
                            stdout=subprocess.PIPE, text=True).stdout.strip().splitlines()[-1]
    call = os.path.join(os.path.dirname(sanity), "csi-call")
    scratch = tempfile.mkdtemp(prefix="flexvol-bench-csi.")
    result = os.path.join(scratch, "result.json")
    rc = subprocess.run(["unshare", "-m", "--propagation", "private", "--", sys.executable,
                         os.path.abspath(__file__), "--inner", "--loop", os.path.abspath(loop),
                         "--csi", os.path.abspath(csi), "--call", call, "--scratch", scratch,
                         "--result", result, "--rounds", str(a.rounds),
                         "--cycles", str(a.cycles)]).returncode
    if rc == 0:
        with open(result) as f:
            res = json.load(f)
        print(f"CSI beside FlexVolume, loop 64Mi ext4 (flexvol-csi: {csi}; loop: {loop}); "
              f"median ms over {a.rounds} rounds x {a.cycles} cycles (each round's median)")
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
        peak = max(p for r in res["rounds"] for p in r["flex_peak_kb"])
        print(f"memory: flexvol-csi resident {res['rss_start_kb']} KiB at start, "
              f"{res['rss_after_kb']} KiB at most after a cycle, peak {res['hwm_kb']} KiB; "
              f"a FlexVolume call's peak {peak} KiB (the call or a helper it waited for, "
              f"ru_maxrss; nothing resident between calls)")
        if a.json:
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1)
    return bench.release_scratch(scratch, rc)


if __name__ == "__main__":
    sys.exit(main())
