# SPDX-License-Identifier: Apache-2.0
"""Cluster-lane cases: snapshots, restores, clones and capacity of loop.csi.flexvol (issue 38),
through the real kubelet, scheduler, API server and the real sidecars: external-snapshotter's
snapshot-controller and csi-snapshotter (v8.7.0) and external-provisioner (v6.4.0, with
--enable-capacity), all built from their Go modules (tests/kube/csi/build).

The install is tests/kube/overlays/csi-snapshot: the lane's csi-controller install plus
deploy/csi/snapshot (csi-snapshotter beside each node's csi-loop, node-deployment),
deploy/csi/snapshot/controller (the snapshot-controller, --enable-distributed-snapshotting) and
deploy/csi/capacity (CSIStorageCapacity, the CSIDriver's storageCapacity), after the CRDs
(deploy/csi/snapshot/crd), as an operator installs them.

Only with FLEXVOL_KUBE_CSI=1 and FLEXVOL_KUBE_CSI_SNAPSHOT=1 (`make check-kube-csi` with the
snapshotter among KUBE_CSI_SIDECARS, `make check-kube-csi-snapshot`); CI builds the registrar
only and runs none of these. FLEXVOL_KUBE_CSI_SNAPSHOT_PLAIN=1 installs tests/kube/overlays/
csi-controller instead (no snapshot or capacity Component): the cases must then fail (the way to
see that they can).
"""
import os
import re
import time

import cluster as C
import cases_csi as CSI
from run import NS, CaseFailed, check

DRIVER = CSI.DRIVER
OVERLAY = "csi-controller" if os.environ.get("FLEXVOL_KUBE_CSI_SNAPSHOT_PLAIN") == "1" else "csi-snapshot"
CLASS = "flexvol-csi-loop"  # deploy/csi/controller's (ext4, WaitForFirstConsumer)
SNAP_CLASS = "flexvol-csi-loop"  # deploy/csi/snapshot's
CRDS = ["volumesnapshotclasses", "volumesnapshotcontents", "volumesnapshots"]
SNAP_GROUP = "snapshot.storage.k8s.io"


def _setup(t):
    """The CRDs first (kubectl apply -k deploy/csi/snapshot/crd, then Established), then the
    overlay, then the snapshot-controller's rollout."""
    if t.installed != OVERLAY:
        t.k("apply", "-k", os.path.join(C.ROOT, "deploy", "csi", "snapshot", "crd"), timeout=120)
        t.k("wait", "--for=condition=Established", "--timeout=60s",
            *[f"crd/{c}.{SNAP_GROUP}" for c in CRDS], timeout=90)
    CSI._setup(t, OVERLAY)
    if OVERLAY == "csi-snapshot":
        r = t.k("-n", "kube-system", "rollout", "status", "deploy/flexvol-snapshot-controller",
                "--timeout=180s", check=False, timeout=210)
        if r.returncode != 0:
            raise CaseFailed(f"snapshot-controller: {r.stderr.strip()} "
                             f"{t.k('-n', 'kube-system', 'logs', 'deploy/flexvol-snapshot-controller', '--tail=20', check=False).stdout}")


def claim(t, name, size, cls=CLASS, source=None):
    spec = {"accessModes": ["ReadWriteOnce"], "storageClassName": cls,
            "resources": {"requests": {"storage": size}}}
    if source:
        spec["dataSource"] = source
    t.apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": name, "namespace": NS}, "spec": spec})


def handle(t, name):
    pv = t.kj("get", "pvc", name, "-n", NS)["spec"]["volumeName"]
    return t.kj("get", "pv", pv)["spec"]["csi"]["volumeHandle"]


def snap_logs(t):
    return (CSI.node_logs(t, "csi-snapshotter", "csi-provisioner") +
            t.k("-n", "kube-system", "logs", "deploy/flexvol-snapshot-controller", "--tail=20",
                check=False).stdout[-1500:])


def wait_ready(t, snap, timeout=180):
    def ready():
        st = t.kj("get", "volumesnapshot", snap, "-n", NS).get("status") or {}
        if (st.get("error") or {}).get("message"):
            print(f"     {snap}: {st['error']['message']}", flush=True)
        return st.get("readyToUse") is True and st
    try:
        return C.wait_for(f"VolumeSnapshot {snap} readyToUse", ready, timeout)
    except TimeoutError as e:
        s = t.k("get", "volumesnapshot", snap, "-n", NS, "-o", "yaml", check=False).stdout
        raise CaseFailed(f"{e}: {s[-1500:]}\n{snap_logs(t)}")


def read_pod(t, name, claim_name, want, unwanted=()):
    t.pod(name, "cat /data/f", claim=claim_name)
    try:
        t.wait_pod(name, ("Succeeded",), timeout=240)
    except CaseFailed as e:
        raise CaseFailed(f"{e}\nclaim {claim_name}: {CSI.claim_events(t, claim_name)}\n{snap_logs(t)}")
    log = t.logs(name)
    for w in want:
        check(w in log, f"{name}: {w!r} not read from {claim_name}: {log!r}")
    for u in unwanted:
        check(u not in log, f"{name}: {u!r} read from {claim_name}: {log!r}")
    return log


def case_csi_snapshot_loop(t):
    """A loop claim with data (its pod running: the filesystem frozen around the copy), a
    VolumeSnapshot of it: the snapshot-controller labels its content with the node, that node's
    csi-snapshotter calls CreateSnapshot, readyToUse, the copy <id>.snap in the node's loop
    root; the pod writes more; a claim restored from the snapshot (external-provisioner's
    CreateVolume from the snapshot) holds the first data only, a claim cloned from the source
    claim holds both, each read by a pod; everything deleted: the images and the snapshot's copy
    gone (DeletionPolicy Delete)."""
    _setup(t)
    src, snap, rest, clone = "csi-snap-src", "csi-snap", "csi-snap-restore", "csi-snap-clone"
    files = []
    try:
        claim(t, src, "64Mi")
        t.pod(f"{src}-w", "echo BEFORE > /data/f && sync && cat /data/f && sleep 3600", claim=src)
        t.wait_pod(f"{src}-w", timeout=180)
        t.wait_log(f"{src}-w", "BEFORE")
        vid = handle(t, src)
        files.append(t.backing(vid + ".img"))
        t0 = time.monotonic()
        t.apply({"apiVersion": f"{SNAP_GROUP}/v1", "kind": "VolumeSnapshot",
                 "metadata": {"name": snap, "namespace": NS},
                 "spec": {"volumeSnapshotClassName": SNAP_CLASS,
                          "source": {"persistentVolumeClaimName": src}}})
        st = wait_ready(t, snap)
        t_ready = time.monotonic() - t0
        content = t.kj("get", "volumesnapshotcontent", st["boundVolumeSnapshotContentName"])
        sid = content["status"]["snapshotHandle"]
        managed = content["metadata"].get("labels", {}).get("snapshot.storage.kubernetes.io/managed-by")
        check(managed == C.NODE, f"content {content['metadata']['name']} managed-by {managed!r}, not {C.NODE}")
        check(content["spec"]["driver"] == DRIVER and content["spec"]["source"]["volumeHandle"] == vid,
              f"content: {content['spec']}")
        snapfile = t.backing(sid + ".snap")
        files.append(snapfile)
        check(os.path.isfile(snapfile), f"no snapshot file {snapfile}: {os.listdir(os.path.dirname(snapfile))}")
        print(f"     {snap}: {sid} readyToUse {t_ready:.1f} s after the VolumeSnapshot, restoreSize "
              f"{st.get('restoreSize')}, {os.stat(snapfile).st_blocks * 512} bytes allocated", flush=True)
        # after the snapshot: in the volume (and its clone), not in the snapshot (and its restore)
        t.k("exec", "-n", NS, f"{src}-w", "--", "sh", "-c", "echo AFTER >> /data/f && sync")
        claim(t, rest, "64Mi", source={"apiGroup": SNAP_GROUP, "kind": "VolumeSnapshot", "name": snap})
        read_pod(t, f"{rest}-r", rest, ["BEFORE"], ["AFTER"])
        claim(t, clone, "64Mi", source={"kind": "PersistentVolumeClaim", "name": src})
        read_pod(t, f"{clone}-r", clone, ["BEFORE", "AFTER"])
        for c in (rest, clone):
            h = handle(t, c)
            files.append(t.backing(h + ".img"))
            check(os.path.isfile(files[-1]), f"{c}: no image {files[-1]}")
            print(f"     {c}: {h}, events {[e[1] for e in CSI.claim_events(t, c)]}", flush=True)
    finally:
        for p in (f"{src}-w", f"{rest}-r", f"{clone}-r"):
            t.delete_pod(p)
        for c in (rest, clone):
            t.delete("pvc", c)
        t.k("delete", "volumesnapshot", snap, "-n", NS, "--ignore-not-found", "--timeout=120s",
            check=False, timeout=150)
        t.delete("pvc", src)
    for f in files:
        C.wait_for(f"{f} removed", lambda: not os.path.exists(f), 120)


def statvfs_free(path):
    s = os.statvfs(path)
    return s.f_bavail * s.f_frsize


def capacities(t, cls):
    items = t.kj("get", "csistoragecapacities", "-A")["items"]
    return [c for c in items if c.get("storageClassName") == cls]


def q_bytes(qty):
    """A quantity as the API writes CSIStorageCapacity's (an integer with an optional suffix)."""
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60,
             "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
    for u in sorted(units, key=len, reverse=True):
        if qty.endswith(u):
            return int(qty[:-len(u)]) * units[u]
    return int(qty)


def controller_args():
    """The args of deploy/csi/controller's external-provisioner (its one container's args: list,
    read from the patch file as written)."""
    text = open(os.path.join(C.ROOT, "deploy", "csi", "controller", "daemonset-provisioner.yaml")).read()
    m = re.search(r"^( +)args:\n((?:\1  - .*\n)+)", text, re.M)
    check(m, "no args: in deploy/csi/controller/daemonset-provisioner.yaml")
    return [ln.strip()[2:].strip() for ln in m.group(2).splitlines()]


def case_csi_capacity_loop(t):
    """Storage capacity tracking (deploy/csi/capacity): the CSIDriver says storageCapacity, the
    node's external-provisioner publishes one CSIStorageCapacity for the class and node (the
    topology label, owned by the DaemonSet), its capacity the loop root's free space (overcommit
    1); a claim (WaitForFirstConsumer) larger than that keeps its pod Pending with the
    scheduler's event naming the storage, and no CreateVolume is tried; a fitting one binds on
    the node; the capacity Component's provisioner args keep deploy/csi/controller's."""
    _setup(t)
    # the capacity patch repeats the controller's args (a list a patch replaces): none lost
    ds = t.kj("-n", "kube-system", "get", "ds", CSI.NODE_DS)
    prov = [c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "csi-provisioner"]
    check(prov, f"no csi-provisioner in {CSI.NODE_DS}")
    want = controller_args()
    lost = [a for a in want if a not in prov[0]["args"]]
    check(not lost, f"deploy/csi/capacity dropped deploy/csi/controller's provisioner args {lost}")
    cd = t.kj("get", "csidriver", DRIVER)["spec"]
    check(cd.get("storageCapacity") is True, f"CSIDriver {DRIVER}: storageCapacity {cd.get('storageCapacity')}")
    key = f"topology.{DRIVER}/node"

    def published():
        return [c for c in capacities(t, CLASS)
                if (c.get("nodeTopology") or {}).get("matchLabels") == {key: C.NODE}]
    try:
        (cap,) = C.wait_for(f"a CSIStorageCapacity of {CLASS} for {C.NODE}", published, 150)
    except (TimeoutError, ValueError) as e:
        raise CaseFailed(f"{e}: {capacities(t, CLASS)} {CSI.node_logs(t, 'csi-provisioner')}")
    owner = [o.get("kind") for o in cap["metadata"].get("ownerReferences") or []]
    check(owner == ["DaemonSet"], f"CSIStorageCapacity owners {owner}")
    root = os.path.dirname(t.backing("x"))
    have = q_bytes(cap["capacity"])
    free = statvfs_free(root)
    mx = cap.get("maximumVolumeSize")
    print(f"     {cap['metadata']['name']}: capacity {cap['capacity']} ({have} bytes; the loop root "
          f"has {free} free now), maximumVolumeSize {mx}", flush=True)
    # the root's free space moves with every build on this machine: within 10 %
    check(abs(have - free) < free // 10, f"capacity {have} is not the loop root's free space {free}")
    # a claim larger than the node's room: the scheduler keeps its pod off every node
    big = f"{(max(have, free) * 3 // 2) >> 30}Gi"
    names = ("csi-cap-big", "csi-cap-fit")
    try:
        claim(t, names[0], big)
        t.pod(f"{names[0]}-w", "echo BIG > /data/f && sleep 3600", claim=names[0])

        def refused():
            ev = t.k("get", "events", "-n", NS, "--field-selector",
                     f"involvedObject.kind=Pod,involvedObject.name={names[0]}-w,reason=FailedScheduling",
                     "-o", "jsonpath={.items[*].message}", check=False).stdout
            return "did not have enough free storage" in ev and ev
        try:
            ev = C.wait_for(f"pod {names[0]}-w refused by the scheduler for storage", refused, 120)
        except TimeoutError as e:
            raise CaseFailed(f"{e}: {t.pod_debug(names[0] + '-w')}; claim events "
                             f"{CSI.claim_events(t, names[0])}")
        print(f"     {names[0]} ({big}): pod Pending, FailedScheduling: {ev.strip()[:200]}", flush=True)
        # meanwhile a fitting claim binds on the node and its pod runs
        claim(t, names[1], "64Mi")
        t.pod(f"{names[1]}-w", "echo FIT > /data/f && sync && cat /data/f && sleep 3600", claim=names[1])
        t.wait_pod(f"{names[1]}-w", timeout=180)
        t.wait_log(f"{names[1]}-w", "FIT")
        pv = t.kj("get", "pv", t.kj("get", "pvc", names[1], "-n", NS)["spec"]["volumeName"])
        terms = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
        check(any(e.get("key") == key and e.get("values") == [C.NODE] for tm in terms
                  for e in tm.get("matchExpressions") or []), f"{names[1]}'s PV not on {C.NODE}: {terms}")
        # the big one still Pending, never handed to the provisioner (no CreateVolume tried)
        check(t.pod_phase(f"{names[0]}-w") == "Pending", f"{names[0]}-w: {t.pod_debug(names[0] + '-w')}")
        c = t.kj("get", "pvc", names[0], "-n", NS)
        check(c["status"].get("phase") == "Pending" and
              "volume.kubernetes.io/selected-node" not in c["metadata"].get("annotations", {}),
              f"{names[0]}: {c['status']} {c['metadata'].get('annotations')}")
        evs = CSI.claim_events(t, names[0])
        check(not [e for e in evs if e[1] in ("Provisioning", "ProvisioningFailed")],
              f"{names[0]}: CreateVolume was tried: {evs}")
        # after the fitting image (64 MiB sparse: promised space), the published capacity follows
        # (external-provisioner asks again after each CreateVolume)
    finally:
        for n in names:
            t.delete_pod(f"{n}-w")
            t.delete("pvc", n)


def case_csi_capacity_exhausted_loop(t):
    """CreateVolume of a claim that does not fit, handed to the node's external-provisioner
    without the scheduler's look (the claim's selected-node set by hand, as a stale capacity
    would let the scheduler do): RESOURCE_EXHAUSTED, the claim's ProvisioningFailed event says
    why (the loop root's free space), no image is made and the claim stays Pending; external-
    provisioner gives the claim back to the scheduler (the annotation removed)."""
    _setup(t)
    root = os.path.dirname(t.backing("x"))
    big = f"{(statvfs_free(root) * 3 // 2) >> 30}Gi"
    name = "csi-cap-exhausted"
    before = set(os.listdir(root))
    try:
        t.apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                 "metadata": {"name": name, "namespace": NS,
                              "annotations": {"volume.kubernetes.io/selected-node": C.NODE}},
                 "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": CLASS,
                          "resources": {"requests": {"storage": big}}}})

        def failed():
            return [e for e in CSI.claim_events(t, name) if e[1] == "ProvisioningFailed"
                    and "ResourceExhausted" in (e[2] or "")]
        try:
            ev = C.wait_for(f"{name}: ProvisioningFailed ResourceExhausted", failed, 120)
        except TimeoutError as e:
            raise CaseFailed(f"{e}: {CSI.claim_events(t, name)} {CSI.node_logs(t, 'csi-provisioner')}")
        msg = ev[0][2]
        check("does not fit" in msg and "free" in msg, f"the event does not say why: {msg}")
        print(f"     {name} ({big}): {msg[:300]}", flush=True)
        c = t.kj("get", "pvc", name, "-n", NS)
        check(c["status"].get("phase") == "Pending", f"{name}: {c['status']}")
        C.wait_for(f"{name} given back to the scheduler (selected-node removed)",
                   lambda: "volume.kubernetes.io/selected-node" not in
                   t.kj("get", "pvc", name, "-n", NS)["metadata"].get("annotations", {}), 60)
        made = [f for f in set(os.listdir(root)) - before if f.endswith(".img")]
        check(not made, f"images made: {made}")
    finally:
        t.delete("pvc", name)


CASES = []
if os.environ.get("FLEXVOL_KUBE_CSI") == "1" and os.environ.get("FLEXVOL_KUBE_CSI_SNAPSHOT") == "1":
    CASES = [case_csi_snapshot_loop, case_csi_capacity_loop, case_csi_capacity_exhausted_loop]
