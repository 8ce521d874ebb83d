#!/usr/bin/env python3
"""flexvol-csi's raw block volumes and volume health on the VM lane's real iSCSI target and NFS
server (issue 38 points 3 and 5). Run inside the guest by the tests/vm/t-csi-* wrappers:

  tests/vm/csi_cases.py CASE      (iscsi_block, iscsi_health, nfs_health)

The cases drive flexvol-csi with csi-call (built on the host by tests/csi/build) as
tests/vm/iscsi_driver.py's csi_lifecycle does, and share its Case (the facts, a scratch
directory, the iSCSI cleanup).
"""
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from iscsi_driver import (WS, Case, Fail, check, log, lun_disks, mounts_under,  # noqa: E402
                          node_records, pr_key, pr_state, run, sessions, settle, size_of)

BLOCK = {"block": {}, "accessMode": {"mode": "SINGLE_NODE_WRITER"}}
RO_BLOCK = {"block": {}, "accessMode": {"mode": "SINGLE_NODE_READER_ONLY"}}
TGTD_PID = "/run/flexvol-vm/tgtd.pid"


class Endpoint:
    """flexvol-csi --driver @driver of the case's build on a socket in the case's dir (the
    driver log is the case's; the endpoint's own output goes to endpoint.log)"""

    def __init__(self, c, driver, **env):
        self.c = c
        sanity = run(os.path.join(WS, "tests", "csi", "build"), "--print").stdout.strip().splitlines()[-1]
        self.call_bin = os.path.join(os.path.dirname(sanity), "csi-call")
        check(os.access(self.call_bin, os.X_OK), "no csi-call at %s: run tests/csi/build on the host"
              % self.call_bin)
        self.sock = os.path.join(c.dir, "csi.sock")
        self.log = open(os.path.join(c.dir, "endpoint.log"), "w")
        self.proc = subprocess.Popen([os.path.join(c.build, "flexvol-csi"), "--endpoint",
                                      "unix://" + self.sock, "--driver", driver],
                                     env=dict(c.env, FLEXVOL_NODE_NAME=c.node, **env),
                                     stdout=self.log, stderr=self.log)
        end = time.monotonic() + 20
        while not os.path.exists(self.sock):
            if self.proc.poll() is not None or time.monotonic() >= end:
                self.stop()
                raise Fail("flexvol-csi did not start")
            time.sleep(0.05)

    def __call__(self, method, req):
        svc = next((x for x in ("Node", "Controller") if method.startswith(x)), "Identity")
        p = subprocess.run([self.call_bin, "-endpoint", "unix://" + self.sock,
                            "/csi.v1.%s/%s" % (svc, method), json.dumps(req)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
        check(p.returncode == 0, "%s: %s" % (method, p.stderr.strip()))
        return json.loads(p.stdout)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        self.log.close()
        check(not os.path.exists(self.sock), "flexvol-csi left its socket")


def condition_of(st):
    """(abnormal, message) of a NodeGetVolumeStats answer: the VolumeCondition is field 2,
    which csi-call's v1.13 spec shows by number (an empty message when it is all defaults)"""
    c = st.get("unknownFields", {}).get("2", {})
    c = c if isinstance(c, dict) else {}
    return bool(c.get("1", 0)), c.get("2", "")


def condition(csi, vid, path):
    """(abnormal, message, seconds the call took) of NodeGetVolumeStats of @path"""
    t = time.monotonic()
    st = csi("NodeGetVolumeStats", {"volumeId": vid, "volumePath": path})
    return condition_of(st) + (time.monotonic() - t,)


def wait_condition(csi, vid, path, abnormal, limit, bound):
    """poll the condition of @path until it is @abnormal, at most @limit s; every call answered
    within @bound s. The last (abnormal, message)."""
    end = time.monotonic() + limit
    while True:
        ab, msg, took = condition(csi, vid, path)
        check(took < bound, "NodeGetVolumeStats took %.1f s (bound %d s): %s" % (took, bound, msg))
        if ab == abnormal:
            return ab, msg
        check(time.monotonic() < end, "the condition is not %s after %d s: %r"
              % ("abnormal" if abnormal else "normal", limit, (ab, msg)))
        time.sleep(1)


def node_binds(under):
    """the binds of a device node below @under: {target: (node, ro)} (devtmpfs mounts)"""
    out = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            p = line.split()
            sep = p.index("-")
            if p[4].startswith(under + "/") and p[sep + 1] == "devtmpfs":
                out[p[4]] = (p[3].lstrip("/"), "ro" in p[5].split(","))
    return out


def pread(path, size, off, direct=False):
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECT if direct else 0))
    try:
        if not direct:
            return os.pread(fd, size, off)
        import mmap
        buf = mmap.mmap(-1, size)  # page-aligned, as O_DIRECT wants
        os.preadv(fd, [buf], off)
        return bytes(buf)
    finally:
        os.close(fd)


def pwrite(path, data, off):
    fd = os.open(path, os.O_RDWR)
    try:
        os.pwrite(fd, data, off)
        os.fsync(fd)
    finally:
        os.close(fd)


def iscsi_block(c):
    """a LUN as a raw block volume through flexvol-csi (issue 38 point 3): ControllerPublish;
    NodeStageVolume logs in and takes the LUN's reservation (the fence a filesystem stage
    takes) and binds the disk's node in the stage directory, no filesystem made; published on
    two files (one read-only), data written through one, read through the other and from the
    disk itself; its stats are the LUN's size, its condition normal; every call twice; a second
    round reads the data; no session, record, reservation, bind or file left"""
    staging, pods = os.path.join(c.dir, "staging"), os.path.join(c.dir, "pods")
    os.makedirs(staging)
    os.makedirs(pods)
    vid = "pv-csi-block"
    ctx = {"targetPortal": c.portal, "iqn": c.iqn1, "lun": "1"}
    stage = {"volumeId": vid, "stagingTargetPath": staging, "volumeCapability": BLOCK,
             "volumeContext": ctx}
    t1, t2 = os.path.join(pods, "b1"), os.path.join(pods, "b2")
    sfile = os.path.join(staging, vid, "device")
    off, data, saved = 5 << 20, os.urandom(8192), None
    csi = Endpoint(c, "iscsi")
    try:
        for rnd in range(2):
            cpub = {"volumeId": vid, "nodeId": c.node, "volumeCapability": BLOCK, "volumeContext": ctx}
            csi("ControllerPublishVolume", cpub)
            for _ in range(2):
                csi("NodeStageVolume", stage)
            disk = lun_disks(c.iqn1, 1)
            check(len(disk) == 1 and len(sessions(c.iqn1)) == 1, "LUN 1 %r, sessions %r"
                  % (disk, sessions(c.iqn1)))
            disk = disk[0]
            size = size_of(disk)
            check(node_binds(c.dir) == {sfile: (os.path.basename(disk), False)},
                  "stage binds %r, disk %s" % (node_binds(c.dir), disk))
            check(not [m for m in mounts_under(c.dir) if m[1] == disk],
                  "a filesystem of the LUN is mounted: %r" % mounts_under(c.dir))
            keys, holder = pr_state(disk)
            initiator = open("/etc/iscsi/initiatorname.iscsi").read().split("=", 1)[1].strip()
            check(holder and holder[0] == pr_key(initiator) and "registrants only" in holder[1],
                  "the LUN's reservation: keys %r, holder %r" % (keys, holder))
            for t, ro in ((t1, False), (t2, True)):
                pub = {"volumeId": vid, "stagingTargetPath": staging, "targetPath": t,
                       "volumeCapability": BLOCK, "volumeContext": ctx, "readonly": ro}
                for _ in range(2):
                    csi("NodePublishVolume", pub)
            binds = node_binds(c.dir)
            check(binds.get(t1) == (os.path.basename(disk), False) and
                  binds.get(t2) == (os.path.basename(disk), True), "publish binds %r" % binds)
            if rnd == 0:
                saved = pread(t1, len(data), off)  # put back at the end: LUN 1 is shared
                pwrite(t1, data, off)
            check(pread(t2, len(data), off) == data, "the data through the read-only publish")
            check(pread(disk, len(data), off, direct=True) == data, "the data on the LUN itself")
            st = csi("NodeGetVolumeStats", {"volumeId": vid, "volumePath": t1,
                                            "stagingTargetPath": staging})
            check(st["usage"] == [{"unit": "BYTES", "total": str(size)}], "stats %r" % st)
            check(condition_of(st) == (False, ""), "the condition of a well volume: %r" % st)
            if rnd == 1:
                pwrite(t1, saved, off)
            for t in (t1, t2):
                for _ in range(2):
                    csi("NodeUnpublishVolume", {"volumeId": vid, "targetPath": t})
                check(not os.path.exists(t), "the target %s was left" % t)
            for _ in range(2):
                csi("NodeUnstageVolume", {"volumeId": vid, "stagingTargetPath": staging})
            check(not sessions(c.iqn1), "session left after unstage: %r" % sessions(c.iqn1))
            check(not mounts_under(c.dir) and not os.listdir(staging),
                  "left: %r %r" % (mounts_under(c.dir), os.listdir(staging)))
            check(not node_records(), "node records left: %r" % node_records())
            csi("ControllerUnpublishVolume", {"volumeId": vid, "nodeId": c.node})
            log("round %d: raw block stage (reserved), two publishes, data through both and on "
                "the LUN, stats %d bytes, undone: ok" % (rnd + 1, size))
    finally:
        csi.stop()


def iscsi_health(c):
    """volume health over iSCSI (issue 38 point 5): a staged and published LUN is well; with
    the target stopped (SIGSTOP: it answers nothing) its condition turns abnormal, the message
    naming the session and its state, every NodeGetVolumeStats answered within the probe bound;
    the target back, the session recovers and the condition is normal again; unpublish and
    unstage leave nothing. The volume is a read-only raw block one: no reservation (tgt forgets
    a reservation's registration when the session is reinstated, and the reservation it then
    cannot release would stay on LUN 1 for the cases after this one: docs/drivers/iscsi.md)"""
    staging, pods = os.path.join(c.dir, "staging"), os.path.join(c.dir, "pods")
    os.makedirs(staging)
    os.makedirs(pods)
    vid, t = "pv-csi-health", os.path.join(pods, "h1")
    ctx = {"targetPortal": c.portal, "iqn": c.iqn1, "lun": "1"}
    with open(TGTD_PID) as f:
        tgtd = int(f.read())
    csi = Endpoint(c, "iscsi", FLEXVOL_MOUNT_TIMEOUT="8")  # the probe's bound: 2 s
    stopped = False
    try:
        csi("NodeStageVolume", {"volumeId": vid, "stagingTargetPath": staging,
                                "volumeCapability": RO_BLOCK, "volumeContext": ctx})
        csi("NodePublishVolume", {"volumeId": vid, "stagingTargetPath": staging, "targetPath": t,
                                  "volumeCapability": RO_BLOCK, "volumeContext": ctx})
        disk = lun_disks(c.iqn1, 1)[0]
        check(pr_state(disk)[1] is None, "a read-only stage took a reservation: %r"
              % (pr_state(disk),))
        check(run("blockdev", "--getro", disk).stdout.strip() == "1", "the disk is not read-only")
        check(condition(csi, vid, t)[:2] == (False, ""), "well before the target stops")
        os.kill(tgtd, signal.SIGSTOP)
        stopped = True
        # abnormal at once or soon (a read that does not finish within the probe's 2 s), then
        # the session's own state once the initiator has marked it failed (NOP-out timeouts)
        t0, first = time.monotonic(), None
        while True:
            ab, msg, took = condition(csi, vid, t)
            check(took < 2 + 3 + 5, "NodeGetVolumeStats took %.1f s with the target stopped" % took)
            if ab and first is None:
                first = (time.monotonic() - t0, msg)
            if ab and "session" in msg:
                break
            check(time.monotonic() < t0 + 90, "no session condition after 90 s: %r" % ((ab, msg),))
            time.sleep(1)
        check("FAILED" in msg, "the session's state: %s" % msg)
        log("target stopped: abnormal after %.1f s (%s); the session after %.1f s: %s"
            % (first[0], first[1], time.monotonic() - t0, msg))
        os.kill(tgtd, signal.SIGCONT)
        stopped = False
        t0 = time.monotonic()
        wait_condition(csi, vid, t, False, 120, 2 + 3 + 5)
        log("target back: normal after %.1f s" % (time.monotonic() - t0))
        csi("NodeUnpublishVolume", {"volumeId": vid, "targetPath": t})
        csi("NodeUnstageVolume", {"volumeId": vid, "stagingTargetPath": staging})
        settle()
        check(not sessions(c.iqn1), "session left after unstage: %r" % sessions(c.iqn1))
        check(not mounts_under(c.dir) and not os.listdir(staging) and not os.path.exists(t),
              "left: %r" % mounts_under(c.dir))
    finally:
        if stopped:
            os.kill(tgtd, signal.SIGCONT)
        csi.stop()


def nfs_health(c):
    """volume health over NFS (issue 38 point 5): NodeGetVolumeStats is served for nfs, the
    share's figures and its condition; with the server stopped the condition is abnormal ("did
    not answer within 2 s") and every call answers within the probe bound (no hang on a dead
    server); the server back, normal again; unpublish leaves nothing"""
    f = c.f
    sub = "csi-health-%d" % os.getpid()
    os.makedirs(os.path.join(f["FV_NFS_EXPORT"], sub))
    pods = os.path.join(c.dir, "pods")
    os.makedirs(pods)
    vid, t = "pvc-health", os.path.join(pods, "n1")
    cap = {"mount": {}, "accessMode": {"mode": "MULTI_NODE_MULTI_WRITER"}}
    ctx = {"server": f["FV_NFS_SERVER"], "share": f["FV_NFS_EXPORT"], "subPath": sub,
           "nfsVersion": "4.2"}
    csi = Endpoint(c, "nfs", FLEXVOL_MOUNT_TIMEOUT="8")
    stopped = False
    try:
        csi("NodePublishVolume", {"volumeId": vid, "targetPath": t, "volumeCapability": cap,
                                  "volumeContext": ctx})
        st = csi("NodeGetVolumeStats", {"volumeId": vid, "volumePath": t})
        u = {x["unit"]: x for x in st["usage"]}
        check(int(u["BYTES"]["total"]) > 0 and "INODES" in u and condition_of(st) == (False, ""),
              "stats of a well share: %r" % st)
        run("rpc.nfsd", "0")
        stopped = True
        for _ in range(3):
            ab, msg, took = condition(csi, vid, t)
            log("server stopped: %.1f s: %s" % (took, msg))
            check(ab and "did not answer within 2 s" in msg, "the condition: %r" % ((ab, msg),))
            check(took < 2 + 3 + 3, "NodeGetVolumeStats took %.1f s with the server dead" % took)
        run("sh", "-c", "echo 10 >/proc/fs/nfsd/nfsv4leasetime; echo 10 >/proc/fs/nfsd/nfsv4gracetime;"
            " rpc.nfsd 8")
        stopped = False
        t0 = time.monotonic()
        wait_condition(csi, vid, t, False, 120, 2 + 3 + 3)
        log("server back: normal after %.1f s" % (time.monotonic() - t0))
        csi("NodeUnpublishVolume", {"volumeId": vid, "targetPath": t})
        check(not os.path.exists(t) and not mounts_under(c.dir), "left: %r" % mounts_under(c.dir))
    finally:
        if stopped:
            run("rpc.nfsd", "8", check_rc=False)
        csi.stop()
        for m in sorted({m[0] for m in mounts_under(c.dir)}, key=len, reverse=True):
            run("umount", "-l", m, check_rc=False)
        run("rm", "-rf", os.path.join(f["FV_NFS_EXPORT"], sub), check_rc=False)


CASES = {f.__name__: f for f in (iscsi_block, iscsi_health, nfs_health)}


def main():
    if os.environ.get("FLEXVOL_VM") != "1":
        print("csi_cases.py: run inside the VM (tests/vm/run . -- tests/vm/suite t-csi-...)",
              file=sys.stderr)
        return 2
    failed = 0
    for n in sys.argv[1:] or list(CASES):
        c = Case(n)
        t = time.monotonic()
        try:
            CASES[n](c)
            log("%s: ok in %.1f s" % (n, time.monotonic() - t))
        except Exception as e:  # noqa: BLE001 - report any failure of the case
            failed += 1
            print("%s: FAIL: %s: %s" % (n, type(e).__name__, e), file=sys.stderr, flush=True)
            c.dump_log()
        finally:
            c.cleanup()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
