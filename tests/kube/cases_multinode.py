# SPDX-License-Identifier: Apache-2.0
"""Cluster-lane cases on two guest nodes: what only two nodes can show for an iSCSI volume under
the real kubelet and controller-manager (issue 25, point 3).

    make check-kube-multinode    (FLEXVOL_KUBE_MULTINODE=1 python3 tests/kube/run.py -k multinode)

Two VM guests (tests/kube/cases_vmnode.py's Guest, tests/kube/vmnode_guest.py inside), booted
from the host's root, each with its own host name, kubelet port and iSCSI initiator name (so its
own reservation key), join the lane's control plane as nodes flexvol-mn-a and flexvol-mn-b.
The iSCSI target both reach is a tgtd on the host (userspace: this host's kernel has no
initiator, but a target needs none) at 127.0.0.1:13260, its own control port, its LUNs files in
the workspace. Each guest relays its own 127.0.0.1:13260 to the host's through QEMU's gateway
(10.0.2.2), so that the portal in the PV and the address the target advertises in sendtargets
discovery (127.0.0.1:13260, the address the host side of the connection has) are the same on
both nodes. Cases assert on the guests' real state (mount tables, /sys/block, open-iscsi's
sessions and records, the LUN's persistent reservation read with sg_persist) and on the
controller-manager's own log.
"""
import atexit
import json
import os
import re
import shutil
import socket
import subprocess
import time

import cluster as C
import cases_vmnode as V
from run import NS, CaseFailed, check
from cases_vmnode import pr_key

TARGET_PORT = 13260
TARGET_CTL = "1326"                  # tgtd's control port: /var/run/tgtd/socket.1326, no other tgtd's
PORTAL = f"127.0.0.1:{TARGET_PORT}"  # the same on the host and (relayed) in each guest
IQN = "iqn.2024-01.io.flexvol.test:multinode"
LUNS = {1: "move", 2: "shared", 3: "partition",               # FlexVolume's cases
        4: "csi-move", 5: "csi-shared", 6: "csi-partition"}   # iscsi.csi.flexvol's
CSI = os.environ.get("FLEXVOL_KUBE_MULTINODE_CSI") == "1"     # the CSI cases (and their images)
CSI_DRIVER = "iscsi.csi.flexvol"
CSI_INSTALL = "csi-mn"      # the run's kustomization of the CSI install (cases_vmnode.csi_install)
NODES = [("flexvol-mn-a", 10360, "iqn.2024-01.io.flexvol.test:initiator-mn-a"),
         ("flexvol-mn-b", 10361, "iqn.2024-01.io.flexvol.test:initiator-mn-b")]
WORK = os.path.join(C.ROOT, "build", "kube-multinode")
KCM_LOG = C.p("logs", "kube-controller-manager.log")
OOS = "node.kubernetes.io/out-of-service"

GUESTS = []      # [A, B] once multinode_join ran
TARGET = None
WAITS = {}       # what the cases measured, printed by multinode_down


def log(msg):
    print(f"multinode: {msg}", flush=True)


class Target:
    """tgtd on the host, one target with a 64 MiB file-backed LUN per case"""

    def __init__(self):
        self.dir = os.path.join(WORK, "target")
        self.proc = None

    def adm(self, *args):
        return C.sh(["tgtadm", "-C", TARGET_CTL, "--lld", "iscsi", *args])

    def start(self):
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        s = socket.socket()
        try:
            check(s.connect_ex(("127.0.0.1", TARGET_PORT)) != 0, f"127.0.0.1:{TARGET_PORT} is taken on the host")
        finally:
            s.close()
        self.log = open(os.path.join(self.dir, "tgtd.log"), "ab")
        self.proc = subprocess.Popen(["tgtd", "-f", "-C", TARGET_CTL, "--iscsi", f"portal={PORTAL}"],
                                     stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        C.wait_for("the host's tgtd", lambda: self.proc.poll() is None and subprocess.run(
            ["tgtadm", "-C", TARGET_CTL, "--op", "show", "--mode", "sys"], capture_output=True).returncode == 0, 30, 0.2)
        self.adm("--op", "new", "--mode", "target", "--tid", "1", "-T", IQN)
        for lun, name in LUNS.items():
            f = os.path.join(self.dir, f"{name}.img")
            with open(f, "wb") as fh:
                fh.truncate(64 << 20)
            self.adm("--op", "new", "--mode", "logicalunit", "--tid", "1", "--lun", str(lun), "-b", f)
        self.adm("--op", "bind", "--mode", "target", "--tid", "1", "-I", "ALL")

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            # tgtd ignores TERM: its own shutdown is the target deleted (--force: with its
            # sessions), then the system
            for args in (("--op", "delete", "--mode", "target", "--tid", "1", "--force"),
                         ("--op", "delete", "--mode", "system")):
                subprocess.run(["tgtadm", "-C", TARGET_CTL, "--lld", "iscsi", *args], capture_output=True, timeout=30)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                log("tgtd did not stop within 30 s: KILL")
                self.proc.kill()
                self.proc.wait()
        for f in (f"/var/run/tgtd/socket.{TARGET_CTL}", f"/var/run/tgtd/socket.{TARGET_CTL}.lock"):
            if os.path.exists(f):
                os.unlink(f)
        shutil.rmtree(self.dir, ignore_errors=True)


class MGuest(V.Guest):
    """a guest of the two-node set: its own workspace dir, the relay to the host's target"""

    portal = PORTAL

    def __init__(self, cl, name, port, initiator):
        super().__init__(cl, name, port, initiator)
        self.dir = os.path.join(WORK, name)

    def prepare(self, images_dir):
        super().prepare(images_dir)
        with open(self.path("node.json")) as f:
            cfg = json.load(f)
        cfg["relays"] = [[TARGET_PORT, "10.0.2.2", TARGET_PORT]]
        if CSI:     # the node plugins' registrar runs on each guest; the controller on the host
            cfg["images"].append(os.path.join(images_dir, "csi-node-driver-registrar.tar"))
        C.write(self.path("node.json"), json.dumps(cfg, indent=1) + "\n")

    def kubelet(self, op):
        r = self.rpc({"op": op}, 400)
        check(r["rc"] == 0, f"{op} in {self.name}: {r}")


def _stop_all():
    global TARGET
    for g in GUESTS:
        if g.running():
            log(f"stopping {g.name}")
            g.stop()
    GUESTS.clear()
    if TARGET is not None:
        TARGET.stop()
        TARGET = None


atexit.register(_stop_all)


def nodes():
    if len(GUESTS) != 2 or not all(g.running() for g in GUESTS):
        raise CaseFailed("no two guest nodes (case multinode_join did not run or failed)")
    return GUESTS


def kcm_lines(since):
    with open(KCM_LOG, errors="replace") as f:
        f.seek(since)
        return f.read().splitlines()


def kcm_pos():
    return os.path.getsize(KCM_LOG)


def kcm_events(since, pv):
    """the attach/detach controller's own record: [(kind, node)] in the order it logged them"""
    out = []
    for ln in kcm_lines(since):
        m = re.search(r"(AttachVolume\.Attach|DetachVolume\.Detach) succeeded for volume .*?" + re.escape(pv), ln)
        if m:
            n = re.search(r'node \\?"(flexvol-mn-[ab])', ln)
            out.append((m.group(1).split(".")[0], n.group(1) if n else "?"))
    return out


def events(t, pod):
    r = t.k("get", "events", "-n", NS, "--field-selector", f"involvedObject.name={pod}", "-o", "json", check=False)
    return [(e.get("reason"), e.get("message", "")) for e in (json.loads(r.stdout)["items"] if r.returncode == 0 else [])]


def wait_event(t, pod, reason, text, timeout=300):
    def found():
        return [m for r, m in events(t, pod) if r == reason and text in m]
    try:
        return C.wait_for(f"event {reason} '{text}' on pod {pod}", found, timeout, 2)
    except TimeoutError as e:
        raise CaseFailed(f"{e}: {t.pod_debug(pod)}")


def attached(t, node):
    return [v["name"] for v in t.kj("get", "node", node)["status"].get("volumesAttached") or []]


def pv_of(lun):
    name = f"mn-{LUNS[lun]}"
    return name, {"targetPortal": PORTAL, "iqn": IQN, "lun": str(lun)}


def in_use(t, g, pv, pod, lun, mode):
    """cases_vmnode's check of a LUN in use by a pod on @g, for this target"""
    return V._iscsi_in_use(t, g, pv, pod, IQN, mode, lun)


def key_hex(k):
    return f"0x{k:016x}"


def both_mode(t, mode):
    # the installer's rolling restart goes through three nodes, two of them emulated: its
    # rollout gets more than the default 180 s
    roll = t.rollout
    t.rollout = lambda timeout=180: roll(timeout=max(timeout, 900))
    for g in nodes():
        V.guest_mode(t, g, mode)


# --- cases -----------------------------------------------------------------------------------------

def case_multinode_join(t):
    """The host's target up; two guests booted at once from the host's root, joined as nodes
    flexvol-mn-a and -b (Ready, the drivers installed on each); each has its own host name and
    its own initiator name, so the two nodes' reservation keys differ."""
    global TARGET
    _stop_all()
    TARGET = Target()
    TARGET.start()
    images = os.environ.get("FLEXVOL_KUBE_IMAGES", os.path.join(C.ROOT, "build", "kube-images"))
    t0 = time.monotonic()
    for name, port, iqn in NODES:
        g = MGuest(t.cl, name, port, iqn)
        g.prepare(images)
        GUESTS.append(g)
        g.boot()
    for g in GUESTS:
        g.wait_up(1500)
    for g in GUESTS:
        g.join(900)
    t.rollout(timeout=900)
    C.wait_for("both guest kubelets to load flexvol/iscsi", lambda: all(
        '"Loaded volume plugin" pluginName="flexvol/iscsi"' in g.kubelet_log() for g in GUESTS), 300, 2)
    WAITS["two guests booted to drivers installed"] = round(time.monotonic() - t0)
    seen = {}
    for g in GUESTS:
        host = g.sh("cat", "/proc/sys/kernel/hostname")["stdout"].strip()
        ini = g.sh("cat", "/etc/iscsi/initiatorname.iscsi")["stdout"].strip()
        check(host == g.name, f"{g.name}: host name {host!r}")
        check(ini == f"InitiatorName={g.initiator}", f"{g.name}: {ini!r}")
        # the target through the guest's relay: sendtargets names it at the PV's portal
        d = g.sh("iscsiadm", "-m", "discoverydb", "-t", "sendtargets", "-p", PORTAL, "--discover",
                 "-o", "nonpersistent")["stdout"]
        check(f"{PORTAL},1 {IQN}" in d, f"{g.name}: discovery at {PORTAL}: {d!r}")
        seen[g.name] = (host, g.initiator, pr_key(g.initiator))
    a, b = seen.values()
    check(a[0] != b[0] and a[1] != b[1] and a[2] != b[2], f"the nodes share an identity: {seen}")
    log("identities: " + "; ".join(f"{n}: initiator {i}, key {key_hex(k)}" for n, (_, i, k) in seen.items()))
    for g in GUESTS:
        log(f"{g.name} times (s): " + ", ".join(f"{k} {v}" for k, v in g.times.items()))


# --- the volume of a case: a FlexVolume PV (controller mode) or a CSI PV of iscsi.csi.flexvol ---------

class FlexVol:
    """A FlexVolume PV of flexvol/iscsi for LUN @lun, in controller mode: the controller-manager
    attaches and detaches it with the driver's own calls (its driver log)."""
    kind, tag, prefix, mode = "FlexVolume", "", "mn", "controller"

    def __init__(self, lun):
        self.lun = lun
        self.pv = f"mn-{LUNS[lun]}"
        self.opts = {"targetPortal": PORTAL, "iqn": IQN, "lun": str(lun)}

    def make(self, t):
        t.ensure_mode("controller")
        V.flex_pv(t, self.pv, "iscsi", self.opts, "ReadWriteOnce", fs="ext4")

    def pod_dir(self, t, pod):
        return V.pod_volume_dir(t, pod, "iscsi", self.pv)

    def on(self, t, node):
        """the volume is in @node's volumesAttached"""
        return any(x.endswith("/" + self.pv) for x in attached(t, node))

    def mark(self, t):
        return {"kcm": kcm_pos(), "drv": t.logpos()}

    def check_held(self, t, a, b):
        """attached to @a alone, nothing of it for @b"""
        check(self.on(t, a.name) and not self.on(t, b.name),
              f"volumesAttached: {a.name} {attached(t, a.name)}, {b.name} {attached(t, b.name)}")

    def check_moved(self, t, since, a, b):
        """detached from @a, then attached to @b: the controller-manager's own log, in that order,
        and the calls that did it"""
        ev = kcm_events(since["kcm"], self.pv)
        check(ev[:2] == [("DetachVolume", a.name), ("AttachVolume", b.name)],
              f"the controller-manager's attach/detach of {self.pv}, in order: {ev}")
        drv = [o["op"] for o in t.ops("kcm", since["drv"]["kcm"]) if o["driver"] == "iscsi" and o["op"] in ("attach", "detach")]
        check(drv[:2] == ["detach", "attach"], f"the controller-manager's driver calls: {drv}")

    def drop(self, t):
        t.drop_pv(self.pv)


class CsiVol(FlexVol):
    """A static CSI PV of iscsi.csi.flexvol for LUN @lun (the FlexVolume options as its volume
    attributes): the attach/detach controller makes and deletes a VolumeAttachment per node,
    external-attacher (on the host node) publishes and unpublishes it (ControllerPublishVolume
    checks the options and touches nothing; ControllerUnpublishVolume has nothing to undo off the
    node), and NodeStageVolume on the node logs in, takes the reservation and mounts."""
    kind, tag, prefix, mode = "CSI", "CSI ", "mn-csi", "csi"

    def make(self, t):
        V.csi_iscsi_pv(t, self.pv, self.opts)

    def pod_dir(self, t, pod):
        return C.p("kubelet", "pods", V.pod_uid(t, pod), "volumes", "kubernetes.io~csi", self.pv, "mount")

    def on(self, t, node):
        return f"kubernetes.io/csi/{CSI_DRIVER}^{self.pv}" in attached(t, node)

    def vas(self, t):
        """{VolumeAttachment: (node, attached)} of the volume"""
        return {a["metadata"]["name"]: (a["spec"]["nodeName"], a.get("status", {}).get("attached"))
                for a in t.kj("get", "volumeattachments")["items"]
                if a["spec"]["source"].get("persistentVolumeName") == self.pv}

    def mark(self, t):
        return dict(super().mark(t), vas=self.vas(t), attacher=len(attacher_log(t)))

    def check_held(self, t, a, b):
        super().check_held(t, a, b)
        v = self.vas(t)
        check(sorted(v.values()) == [(a.name, True)], f"VolumeAttachments of {self.pv}: {v} (only {a.name}'s, attached)")

    def check_moved(self, t, since, a, b):
        """as for FlexVolume in the controller-manager's log; A's VolumeAttachment gone, B's
        attached; external-attacher's Detached of A's before its Attached of B's"""
        ev = kcm_events(since["kcm"], self.pv)
        check(ev[:2] == [("DetachVolume", a.name), ("AttachVolume", b.name)],
              f"the controller-manager's attach/detach of {self.pv}, in order: {ev}")
        now = self.vas(t)
        check(sorted(now.values()) == [(b.name, True)], f"VolumeAttachments of {self.pv}: {now}")
        names = dict(since["vas"], **now)
        ops = attacher_ops(t, since["attacher"], names)
        check(ops[:2] == [("Detached", a.name), ("Attached", b.name)],
              f"external-attacher's calls for {self.pv}, in order: {ops}")

    def drop(self, t):
        try:
            C.wait_for(f"the VolumeAttachments of {self.pv} to go", lambda: not self.vas(t), 180, 2)
        except TimeoutError:
            log(f"VolumeAttachments of {self.pv} left: {self.vas(t)}")
        t.drop_pv(self.pv)


def attacher_log(t):
    r = t.k("-n", "kube-system", "logs", "deploy/flexvol-csi-iscsi-controller", "-c", "csi-attacher", check=False)
    return r.stdout if r.returncode == 0 else ""


def attacher_ops(t, since, names):
    """external-attacher's finished ControllerPublishVolume ("Attached") and ControllerUnpublishVolume
    ("Detached") of the VolumeAttachments @names ({name: (node, ...)}) after offset @since of its
    log, in its order: [(op, node)]"""
    out = []
    for ln in attacher_log(t)[since:].splitlines():
        m = re.search(r'"(Attached|Detached)" VolumeAttachment="([^"]+)"', ln)
        if m and m.group(2) in names:
            out.append((m.group(1), names[m.group(2)][0]))
    return out


# --- the cases' bodies, for either kind -----------------------------------------------------------

def _move(t, vol):
    a, b = nodes()
    pa, pb = f"{vol.prefix}-move-a", f"{vol.prefix}-move-b"
    vol.make(t)
    try:
        V.run_pod(t, a, pa, "echo data-of-a > /data/f && sync && echo WROTE && sleep 3600", vol.pv, "WROTE")
        dev_a = in_use(t, a, vol.pv, pa, vol.lun, vol.mode)
        vol.check_held(t, a, b)
        since = vol.mark(t)
        t0 = time.monotonic()
        V.delete_pods(t, pa)
        V.run_pod(t, b, pb, "cat /data/f; sleep 3600", vol.pv, "data-of-a")
        WAITS[f"{vol.tag}move: pod on A deleted to pod on B reading A's data"] = round(time.monotonic() - t0)
        vol.check_moved(t, since, a, b)
        V._iscsi_gone(a, IQN)
        check(not a.disk_mounts(dev_a), f"A still mounts {dev_a}")
        in_use(t, b, vol.pv, pb, vol.lun, vol.mode)
    finally:
        V.delete_pods(t, pa, pb)
        vol.drop(t)
    V._iscsi_gone(b, IQN, within=120)


def _multiattach(t, vol):
    a, b = nodes()
    pa, pb = f"{vol.prefix}-ma-a", f"{vol.prefix}-ma-b"
    vol.make(t)
    try:
        V.run_pod(t, a, pa, "echo a > /data/f && sync && echo WROTE && sleep 3600", vol.pv, "WROTE")
        V.vpod(t, b, pb, "echo b > /data/f; sleep 3600", vol.pv)
        t0 = time.monotonic()
        msg = wait_event(t, pb, "FailedAttachVolume", "already used by pod(s)", 300)
        WAITS[f"{vol.tag}multi-attach: pod on B created to the refusal event"] = round(time.monotonic() - t0)
        log(f"{vol.kind} refusal: {msg[0]}")
        time.sleep(10)     # the kubelet on B has had its chance to do something wrong
        check(t.pod_phase(pb) == "Pending", f"pod on B: {t.pod_phase(pb)}")
        check(not [s for s in b.sessions() if IQN in s], f"B has a session: {b.sessions()}")
        check(b.lun_disk(IQN, vol.lun) is None, "B has the LUN's disk")
        check(not [m for m in b.mounts() if m[2].startswith("/dev/sd")], "B mounts an sd disk")
        vol.check_held(t, a, b)
        check(a.sh("cat", vol.pod_dir(t, pa) + "/f")["stdout"] == "a\n", "A's data")
    finally:
        V.delete_pods(t, pb, pa)
        vol.drop(t)
    for g in (a, b):
        V._iscsi_gone(g, IQN, within=120)


WRITER = ("echo data-of-a > /data/marker && sync && echo WROTE; i=0; "
          "while true; do i=$((i+1)); echo $i >> /data/seq || break; sync || break; sleep 1; done; "
          "echo WRITER-STOPPED; sleep 3600")


def _can_write(g, dev):
    """one direct write of the last 4 KiB block of @dev, of the bytes already there"""
    r = g.sh("sh", "-c", f"n=$(( $(blockdev --getsize64 {dev}) / 4096 - 1 )); "
             f"dd if={dev} of=/tmp/mn-blk bs=4096 skip=$n count=1 iflag=direct 2>/dev/null && "
             f"dd if=/tmp/mn-blk of={dev} bs=4096 seek=$n count=1 oflag=direct conv=notrunc", check_rc=False)
    return r["rc"] == 0


def _partition(t, vol):
    a, b = nodes()
    pa, pb = f"{vol.prefix}-part-a", f"{vol.prefix}-part-b"
    tag = vol.tag
    vol.make(t)
    ka, kb = pr_key(a.initiator), pr_key(b.initiator)
    a_down = tainted = False
    try:
        V.run_pod(t, a, pa, WRITER, vol.pv, "WROTE")
        dev_a = in_use(t, a, vol.pv, pa, vol.lun, vol.mode)
        seq_a = vol.pod_dir(t, pa) + "/seq"

        def seq_len():
            return len(a.sh("cat", seq_a)["stdout"].split())
        C.wait_for("A's pod writing", lambda: seq_len() >= 3, 60, 1)
        # the partition
        t0 = time.monotonic()
        a.kubelet("stop-kubelet")
        a_down = True
        n0 = seq_len()

        def not_ready():
            n = t.kj("get", "node", a.name)
            return any(c["type"] == "Ready" and c["status"] != "True" for c in n["status"].get("conditions", []))
        C.wait_for(f"node {a.name} NotReady", not_ready, 300, 2)
        WAITS[f"{tag}partition: A's kubelet stopped to node NotReady"] = round(time.monotonic() - t0)
        check(seq_len() > n0, "A's pod stopped writing when its kubelet stopped")
        t.k("delete", "pod", pa, "-n", NS, "--force", "--grace-period=0", check=False)
        since = vol.mark(t)
        V.vpod(t, b, pb, "cat /data/marker; wc -l < /data/seq; cat /data/seq > /tmp/seq; "
               "awk '{ if (NR > 1 && p != NR - 1) { print \"GAP at \" NR; exit 1 } p = $1 }' /data/seq && "
               "echo SEQ-OK; sleep 3600", vol.pv)
        t1 = time.monotonic()
        # A's pod is gone from the API: "... Volume is already exclusively attached to one node,
        # waiting on detach before it can be attached to another node"
        wait_event(t, pb, "FailedAttachVolume", "Waiting for detach", 300)
        WAITS[f"{tag}partition: pod on B created to its attach refusal"] = round(time.monotonic() - t1)
        vol.check_held(t, a, b)      # (before the taint: still attached to A alone)
        # the operator's out-of-service taint: detach at once, without the controller's 6 min wait
        t2 = time.monotonic()
        t.k("taint", "node", a.name, f"{OOS}=nodeshutdown:NoExecute")
        tainted = True
        C.wait_for("the controller-manager's detach from A and attach to B", lambda: [
            x for x in kcm_events(since["kcm"], vol.pv) if x == ("AttachVolume", b.name)], 600, 2)
        WAITS[f"{tag}partition: out-of-service taint to attach on B"] = round(time.monotonic() - t2)
        vol.check_moved(t, since, a, b)
        # the fence: B's mountdevice (CSI: NodeStageVolume) refused, naming A's key
        want = f"reserved for writing by another node (SCSI persistent reservation key {key_hex(ka)}"
        msg = wait_event(t, pb, "FailedMount", want, 400)
        WAITS[f"{tag}partition: out-of-service taint to B's fenced mountdevice"] = round(time.monotonic() - t2)
        log(f"{vol.kind} fence: {msg[0][:400]}")
        check(key_hex(kb) in msg[0], f"B's own key {key_hex(kb)} not in {msg[0]!r}")
        csi = isinstance(vol, CsiVol)
        if csi:
            # over CSI the refused NodeStageVolume logs out again and leaves nothing on B: the
            # reservation read on A's disk; the operator's procedure on B starts with a login of
            # its own (docs/fencing.md, "Over CSI")
            check(not [m for m in b.mounts() if m[2].startswith("/dev/sd")], "B mounts an sd disk")
            keys, res = a.pr_state(dev_a)
            check(res is not None and res[0] == ka and keys == [ka], f"reservation: {[hex(k) for k in keys]} {res}")
        else:
            dev_b = b.lun_disk(IQN, vol.lun)
            check(dev_b is not None, "B has no disk of the LUN after its attach")
            check(not b.disk_mounts(dev_b), f"B mounts {dev_b}: {b.disk_mounts(dev_b)}")
            keys, res = b.pr_state(dev_b)
            check(res is not None and res[0] == ka and keys == [ka], f"reservation: {[hex(k) for k in keys]} {res}")
        n1 = seq_len()
        time.sleep(3)
        check(seq_len() > n1, "A's pod is no longer writing (it should be: A still holds the LUN)")
        check(t.pod_phase(pb) == "Pending", f"pod on B: {t.pod_phase(pb)}")
        # docs/fencing.md, "Breaking the reservation of a dead node", on B
        t3 = time.monotonic()
        # kubelet's retry of B's mountdevice may drop B's registration between the two, and over
        # CSI a refused retry logs B's session out again (docs/fencing.md): the whole procedure
        # again, as the docs say, up to five times
        if csi:
            b.sh("iscsiadm", "-m", "discovery", "-t", "sendtargets", "-p", PORTAL)
        r = {"rc": -1, "stderr": "no disk of the LUN on B"}
        for i in range(5):
            if csi:
                b.sh("iscsiadm", "-m", "node", "-T", IQN, "-p", PORTAL, "--login", check_rc=False)
                try:
                    C.wait_for("the LUN's disk on B after its own login", lambda: b.lun_disk(IQN, vol.lun), 30, 0.5)
                except TimeoutError:
                    log(f"preempt on B, try {i + 1}: no disk after the login")
                    continue
            dev_b = b.lun_disk(IQN, vol.lun)
            if dev_b is None:
                continue
            b.sh("sg_persist", "--out", "--register", f"--param-sark={key_hex(kb)}", dev_b, check_rc=False)
            r = b.sh("sg_persist", "--out", "--preempt", f"--param-rk={key_hex(kb)}",
                     f"--param-sark={key_hex(ka)}", "--prout-type=5", dev_b, check_rc=False)
            if r["rc"] == 0:
                break
            log(f"preempt on B, try {i + 1}: exit {r['rc']}: {r.get('stderr', '').strip()[-200:]}")
        check(r["rc"] == 0, f"the preempt on B failed 5 times: {r}")
        t.wait_pod(pb, timeout=600)
        t.wait_log(pb, "SEQ-OK", 120)
        WAITS[f"{tag}partition: preempt on B to B's pod reading A's data"] = round(time.monotonic() - t3)
        out = t.logs(pb)
        check(out.startswith("data-of-a\n"), f"B's pod log: {out!r}")
        log(f"{vol.kind}: B read A's marker and {out.split()[1]} lines of A's sequence without a gap")
        dev_b = b.lun_disk(IQN, vol.lun)    # (over CSI: the staged session's disk)
        keys, res = b.pr_state(dev_b)
        check(res is not None and res[0] == kb and keys == [kb], f"reservation after: {[hex(k) for k in keys]} {res}")
        check(not _can_write(a, dev_a), "A can still write to the LUN after the preempt")
        in_use(t, b, vol.pv, pb, vol.lun, vol.mode)
        # A comes back: its kubelet finds its pod gone and cleans up; B keeps the LUN
        t.k("taint", "node", a.name, f"{OOS}-")
        tainted = False
        a.kubelet("start-kubelet")
        a_down = False
        t4 = time.monotonic()
        C.wait_for("A's kubelet to unmount and log out", lambda: not a.disk_mounts(dev_a) and not [
            s for s in a.sessions() if IQN in s], 400, 3)
        WAITS[f"{tag}partition: A's kubelet back to A cleaned up"] = round(time.monotonic() - t4)
        V._iscsi_gone(a, IQN)
        keys, res = b.pr_state(dev_b)
        check(res is not None and res[0] == kb, f"A's teardown touched B's reservation: {[hex(k) for k in keys]} {res}")
        vol.check_held(t, b, a)      # (A back: nothing of the volume attached to it again)
    finally:
        if tainted:
            t.k("taint", "node", a.name, f"{OOS}-", check=False)
        if a_down:
            a.rpc({"op": "start-kubelet"}, 400)
        V.delete_pods(t, pb, pa)
        vol.drop(t)
    V._iscsi_gone(b, IQN, within=120)


# --- cases: FlexVolume --------------------------------------------------------------------------------

def case_multinode_iscsi_move(t):
    """Controller mode, a ReadWriteOnce iSCSI volume: a pod on A writes; deleted, and a pod on
    B takes the claim. The controller-manager detaches from A before it attaches to B (its own
    log, in that order; the driver's detach and attach in its driver log); A has no session,
    record, disk or mount left; on B the LUN is mounted, B's key holds the reservation, and B
    reads A's data."""
    _move(t, FlexVol(1))


def case_multinode_multiattach(t):
    """Controller mode, one ReadWriteOnce volume, a pod on each node at once: the attach/detach
    controller refuses B (event FailedAttachVolume; v1.37's message: 'Waiting for detach for volume
... Volume is already used by pod(s) <A's pod>', older releases' 'Multi-Attach error ...'); on B no session to the
    target, no disk, no mount; the pod on A goes on writing."""
    _multiattach(t, FlexVol(2))


def case_multinode_partition(t):
    """Controller mode: node A partitioned while its pod writes (A's kubelet stopped, the guest
    and the pod's container running). A goes NotReady; its pod force-deleted; a pod on B for the
    claim is refused (FailedAttachVolume, 'Waiting for detach') while the volume is attached to A; the out-of-service taint
    on A (as an operator would): the controller-manager force-detaches from A and attaches to
    B; B's mountdevice is refused by the fence, naming A's reservation key, nothing mounted on B,
    A still writing. Then docs/fencing.md's procedure on B (register, preempt A's key): B's
    kubelet retries, mounts, and reads A's data intact (the marker, the sequence without a gap);
    A's writes are rejected by the target. Each wait measured. Afterwards A's kubelet restarted
    and the taint removed: A cleans up (no mount, session or record), B's key released."""
    _partition(t, FlexVol(3))


# --- cases: the same through iscsi.csi.flexvol (deploy/csi/iscsi) ----------------------------------

def case_multinode_csi_install(t):
    """deploy/csi/iscsi (and deploy/csi/nfs, whose controller is scaled to 0 here: no share) as
    shipped, through cases_vmnode.csi_install: the node plugins (HOST_NS_PID=kubelet) on the
    host and both guests, registered by each guest's kubelet with the node's name as node ID;
    the iscsi controller (flexvol-csi and external-attacher) on the host node, which no case
    partitions."""
    a, b = nodes()
    V.csi_install(t, ("nfs.invalid", "/no-share"), {"flexvol-csi-iscsi-controller": (C.NODE, "127.0.0.1", 1),
                                                   "flexvol-csi-nfs-controller": (C.NODE, "127.0.0.1", 0)},
                  name=CSI_INSTALL)
    V.csi_registered(t, [a.name, b.name])
    pods = t.kj("-n", "kube-system", "get", "pods", "-l", "app.kubernetes.io/name=flexvol-csi-iscsi-controller")["items"]
    check([p["spec"]["nodeName"] for p in pods] == [C.NODE], f"the iscsi controller's pods: "
          f"{[(p['metadata']['name'], p['spec'].get('nodeName')) for p in pods]}")


def case_multinode_csi_move(t):
    """The move through iscsi.csi.flexvol (a static CSI PV of LUN 4): a pod on A writes (A's
    VolumeAttachment attached by external-attacher, NodeStageVolume's session, staging and pod
    mounts, A's key holding the reservation); deleted, a pod on B: the controller-manager
    detaches from A (A's VolumeAttachment deleted, external-attacher's ControllerUnpublishVolume)
    before it attaches to B (B's VolumeAttachment); A has no session, record, disk or mount left;
    B has the same state with B's key and reads A's data."""
    _move(t, CsiVol(4))


def case_multinode_csi_multiattach(t):
    """Multi-Attach through iscsi.csi.flexvol (attachRequired: true; LUN 5): a pod on A, then one
    on B for the same ReadWriteOnce claim: FailedAttachVolume on B's pod, no VolumeAttachment for
    B (A's alone, attached), nothing of the target on B (session, disk, mount); A's data there."""
    _multiattach(t, CsiVol(5))


def case_multinode_csi_partition(t):
    """The partition through iscsi.csi.flexvol (LUN 6): A's kubelet stopped while its pod writes;
    A NotReady, its pod force-deleted; B's pod refused attach while A's VolumeAttachment stands;
    the out-of-service taint on A: the controller-manager deletes A's VolumeAttachment
    (external-attacher's ControllerUnpublishVolume answers at once: nothing to undo off the
    node, which it cannot reach) and attaches to B; B's NodeStageVolume refused by the fence,
    naming A's key (FailedMount), nothing mounted on B, A still writing; docs/fencing.md's
    register and preempt on B: B's pod reads A's data intact (marker, sequence without a gap),
    A's direct write rejected; A's kubelet back and the taint removed: A unpublishes, unstages
    and logs out, B's reservation and VolumeAttachment untouched."""
    _partition(t, CsiVol(6))


def case_multinode_csi_remove(t):
    """deploy/csi/nfs's and deploy/csi/iscsi's objects deleted (the node plugins' DaemonSets,
    the controllers, the CSIDrivers): each guest's kubelet drops both drivers from its CSINode;
    the lane's install is the kubeadm one again, as the FlexVolume cases after these expect."""
    a, b = nodes()
    for kind, name in (("deploy", "flexvol-csi-iscsi-controller"), ("deploy", "flexvol-csi-nfs-controller"),
                       ("ds", "flexvol-csi-iscsi-node"), ("ds", "flexvol-csi-nfs-node")):
        t.k("-n", "kube-system", "delete", kind, name, "--ignore-not-found", "--cascade=foreground",
            "--wait=true", "--timeout=180s", check=False, timeout=210)
    t.k("delete", "csidriver", *V.CSI_DRIVERS, "--ignore-not-found", check=False)

    def registered(n):
        c = t.kj("get", "csinode", n)
        return [x["name"] for x in c.get("spec", {}).get("drivers") or []]
    C.wait_for("the CSI drivers gone from both guests' CSINodes",
               lambda: not any(registered(n) for n in (a.name, b.name)), 180, 2)
    t.installed = "kubeadm"


def case_multinode_fence_node_mode(t):
    """Node mode (no attach controller: nothing in Kubernetes stops the second node): a pod on A
    writes; a pod on B for the same ReadWriteOnce claim: B's mount is refused by the fence (the
    event names A's key), nothing of the LUN mounted on B, A's key alone registered; A's pod
    deleted, B's retry mounts and reads A's data."""
    a, b = nodes()
    both_mode(t, "node")
    pv, opts = pv_of(2)
    ka, kb = pr_key(a.initiator), pr_key(b.initiator)
    V.flex_pv(t, pv, "iscsi", opts, "ReadWriteOnce", fs="ext4")
    try:
        V.run_pod(t, a, "mn-nf-a", "echo node-a > /data/n && sync && echo WROTE && sleep 3600", pv, "WROTE")
        dev_a = in_use(t, a, pv, "mn-nf-a", 2, "node")
        gpos = b.logpos()
        V.vpod(t, b, "mn-nf-b", "cat /data/n; sleep 3600", pv)
        t0 = time.monotonic()
        msg = wait_event(t, "mn-nf-b", "FailedMount", f"SCSI persistent reservation key {key_hex(ka)}", 400)
        WAITS["node mode: pod on B created to its fenced mount"] = round(time.monotonic() - t0)
        check(key_hex(kb) in msg[0], f"B's own key not in {msg[0]!r}")
        b.wait_op("mount", gpos, "iscsi", status="Failure")
        check(not [m for m in b.mounts() if m[2].startswith("/dev/sd")], "B mounts an sd disk")
        keys, res = a.pr_state(dev_a)
        check(res is not None and res[0] == ka and keys == [ka], f"reservation: {[hex(k) for k in keys]} {res}")
        t1 = time.monotonic()
        V.delete_pods(t, "mn-nf-a")
        t.wait_pod("mn-nf-b", timeout=600)
        t.wait_log("mn-nf-b", "node-a", 120)
        WAITS["node mode: A's pod deleted to B reading A's data"] = round(time.monotonic() - t1)
        V._iscsi_gone(a, IQN)
        in_use(t, b, pv, "mn-nf-b", 2, "node")
    finally:
        V.delete_pods(t, "mn-nf-b", "mn-nf-a")
        t.drop_pv(pv)
    for g in (a, b):
        V._iscsi_gone(g, IQN, within=120)


def case_multinode_down(t):
    """Both guests leave as in vmnode_down (nothing left in either: pod mounts, sessions,
    records, loop devices, node mounts, processes; powered off with 0; Node objects deleted;
    ports closed), then the host's tgtd stops: no process, control socket or LUN file left."""
    global TARGET
    gs = nodes()
    for g in gs:
        rep = g.stop()
        left = {k: v for k, v in rep.items() if v and k != "containers_left_at_stop"}
        check(not left, f"left in {g.name}: {left}")
        check(g.proc.returncode == 0, f"{g.name}'s run ended with {g.proc.returncode}:\n{g.console_tail()}")
        check(t.k("get", "node", g.name, check=False).returncode != 0, f"Node {g.name} is still there")
    GUESTS.clear()
    pid = TARGET.proc.pid
    TARGET.stop()
    TARGET = None
    check(not os.path.exists(f"/proc/{pid}"), "tgtd still runs")
    check(not os.path.exists(f"/var/run/tgtd/socket.{TARGET_CTL}"), "tgtd's control socket is left")
    check(not os.path.exists(os.path.join(WORK, "target")), "the LUN files are left")
    for k, v in WAITS.items():
        log(f"wait: {k}: {v} s")


CASES = []
if os.environ.get("FLEXVOL_KUBE_MULTINODE") == "1":
    CASES = [case_multinode_join, case_multinode_iscsi_move, case_multinode_multiattach,
             case_multinode_partition]
    if CSI:
        CASES += [case_multinode_csi_install, case_multinode_csi_move, case_multinode_csi_multiattach,
                  case_multinode_csi_partition, case_multinode_csi_remove]
    CASES += [case_multinode_fence_node_mode, case_multinode_down]
