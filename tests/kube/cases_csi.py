# SPDX-License-Identifier: Apache-2.0
"""Cluster-lane cases: flexvol's loop driver over CSI (deploy/csi) and the migration of FlexVolume
PVs to it and back (flexvol-migrate, docs/migration.md), through the real kubelet
(CSI plugin registration, NodeStageVolume/NodePublishVolume through flexvol-csi), API server and
controller-manager (the PV binder: the claim Lost, then Bound again).

Only with FLEXVOL_KUBE_CSI=1 (`make check-kube-csi`, which builds flexvol-csi, the sidecars and
the CSI images); the plain `make check-kube` has none of them. The install is
tests/kube/overlays/csi: the lane's kubeadm install plus the deploy/csi Component (its own
DaemonSet, flexvol-csi-node).

csi_dynamic_loop and csi_migrate_reclaim_loop add deploy/csi/controller
(tests/kube/overlays/csi-controller): the external-provisioner in node-deployment mode and the
external-resizer, on the endpoint's Controller service (not with FLEXVOL_KUBE_CSI_CONTROLLER=0:
CI builds the registrar only). With
FLEXVOL_E2E_DIR (`make check-kube-csi-e2e`) Kubernetes' external storage
e2e suites run through CSI too (csi_e2e_loop).
"""
import json
import os
import subprocess
import time
import uuid

import cluster as C
import e2e_suites as E2E
from run import HERE, NS, CaseFailed, check

DRIVER = "loop.csi.flexvol"
# flexvol-migrate (csi.mk, vmnode.mk); a lane started with FLEXVOL_PROVISIONER_BIN only runs its
# `migrate` command, which is flexvol-migrate beside it (or, in an older build, the command itself)
MIGRATE = [os.environ["FLEXVOL_MIGRATE_BIN"]] if os.environ.get("FLEXVOL_MIGRATE_BIN") else \
    [os.environ.get("FLEXVOL_PROVISIONER_BIN", os.path.join(C.ROOT, "build", "flexvol-provisioner")), "migrate"]
SAVE_DIR = C.p("migrate")
# Downtime per volume, measured by the migration cases (pod stop -> pod Running on the new PV),
# printed at the end of each case for docs/migration.md.
TIMES = {}


NODE_DS = "flexvol-csi-node"


def rollout_ds(t, name, timeout=180):
    """`rollout status` of the DaemonSet @name (kube-system), once its controller has seen its
    latest generation (right after an apply it may still report the old one as rolled out)."""
    def observed():
        ds = t.kj("-n", "kube-system", "get", "ds", name)
        st = ds.get("status", {})
        return (st.get("observedGeneration", 0) >= ds["metadata"]["generation"] and
                st.get("desiredNumberScheduled", 0) >= 1)
    C.wait_for(f"the DaemonSet controller to observe {name}", observed, 60)
    r = t.k("-n", "kube-system", "rollout", "status", f"ds/{name}", f"--timeout={timeout}s", check=False,
            timeout=timeout + 30)
    if r.returncode != 0:
        pods = t.k("-n", "kube-system", "get", "pods", "-o", "wide", check=False).stdout
        raise CaseFailed(f"rollout of {name}: {r.stderr.strip()}\n{pods}")


def host_ns_patch(ds, container):
    """This machine's PID 1 is a sandbox init whose namespace files its root cannot open (nsenter
    -t 1: Permission denied): flexvol-csi enters kubelet's mount namespace instead
    (HOST_NS_PID=kubelet, deploy/csi/daemonset-node.yaml: a process of that name on each node)."""
    return {"patch": json.dumps({
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": ds, "namespace": "kube-system"},
        "spec": {"template": {"spec": {"containers": [{"name": container, "env": [
            {"name": "HOST_NS_PID", "value": "kubelet"}]}]}}}})}


def _install(t, overlay):
    """Install tests/kube/overlays/@overlay (csi, or csi-controller on top of it) with the
    environment of this run (host_ns_patch), given by a kustomization of this run's over the
    overlay, so that one apply rolls each DaemonSet out once: the installer's (untouched by the
    CSI components) and flexvol-csi-node."""
    d = C.p("csi-install", overlay)
    os.makedirs(d, exist_ok=True)
    C.write(os.path.join(d, "kustomization.yaml"), json.dumps({
        "resources": [os.path.relpath(os.path.join(HERE, "overlays", overlay), d)],
        "patches": [host_ns_patch(NODE_DS, "csi-loop")]}))
    t.k("apply", "-k", d, timeout=120)
    t.rollout()
    rollout_ds(t, NODE_DS)
    t.installed = overlay
    t.mode = "controller"


def node_logs(t, *containers, ds=NODE_DS):
    return "".join(t.k("-n", "kube-system", "logs", f"ds/{ds}", "-c", c, "--tail=30", check=False).stdout[-1500:]
                   for c in containers)


def _setup(t, overlay="csi"):
    if t.installed == overlay or (overlay == "csi" and t.installed == "csi-controller"):
        return
    _install(t, overlay)
    # kubelet registers the plugin through the registrar's socket: CSINode lists the driver
    def registered():
        n = t.kj("get", "csinode", C.NODE)
        return [d for d in n.get("spec", {}).get("drivers") or [] if d["name"] == DRIVER]
    try:
        C.wait_for(f"{DRIVER} in CSINode {C.NODE}", registered, 120)
    except TimeoutError as e:
        raise CaseFailed(f"{e}: {node_logs(t, 'csi-registrar', 'csi-loop')}")


def _token(t):
    """A token of the ServiceAccount deploy/csi/migrate/rbac.yaml makes, for the migrate command
    (run from the host as an operator runs it, with the cluster's CA)."""
    if getattr(t, "migrate_token", None):
        return t.migrate_token
    t.k("apply", "-f", os.path.join(C.ROOT, "deploy", "csi", "migrate", "rbac.yaml"))
    tok = t.k("-n", "kube-system", "create", "token", "flexvol-migrate", "--duration=2h").stdout.strip()
    path = C.p("migrate-token")
    C.write(path, tok, 0o600)
    t.migrate_token = path
    return path


def migrate(t, pv, rollback=False, check_rc=True):
    os.makedirs(SAVE_DIR, exist_ok=True)
    argv = MIGRATE + ["--server", C.API, "--token-file", _token(t),
            "--certificate-authority", C.p("pki", "ca.crt"), "--save",
            os.path.join(SAVE_DIR, pv + ".json"), "--timeout", "90"]
    if rollback:
        argv.append("--rollback")
    r = subprocess.run(argv + [pv], capture_output=True, text=True, timeout=200)
    if check_rc and r.returncode != 0:
        raise CaseFailed(f"migrate {pv}{' --rollback' if rollback else ''}: exit {r.returncode}: "
                         f"{r.stderr.strip()} {r.stdout.strip()}")
    return r


def migrate_when_idle(t, pv, rollback=False, timeout=120):
    """Run migrate until it stops refusing with "in use" (exit 3): the kubelet reports the
    volume unmounted (node status volumesInUse) a few seconds after the pod is gone."""
    end = time.monotonic() + timeout
    while True:
        r = migrate(t, pv, rollback, check_rc=False)
        if r.returncode == 0:
            return r
        if r.returncode != 3 or time.monotonic() > end:
            raise CaseFailed(f"migrate {pv}: exit {r.returncode}: {r.stderr.strip()}")
        time.sleep(1)


def csi_pv(t, name, file, size="64Mi", block=False):
    """A static CSI PV of the loop image @file and its claim; @block: volumeMode Block."""
    csi = {"driver": DRIVER, "volumeHandle": name, "volumeAttributes": {"file": file, "size": size}}
    if not block:
        csi["fsType"] = "ext4"
    mode = "Block" if block else "Filesystem"
    t.apply({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
             "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                      "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                      "volumeMode": mode, "csi": csi,
                      "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                          {"key": "kubernetes.io/hostname", "operator": "In", "values": [C.NODE]}]}]}}}})
    t.apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": name, "namespace": NS},
             "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": name,
                      "volumeMode": mode, "resources": {"requests": {"storage": size}}}})
    C.wait_for(f"claim {name} Bound", lambda: t.kj("get", "pvc", name, "-n", NS)
               ["status"].get("phase") == "Bound", 60)


def kubelet_dir():
    return C.p("kubelet")


def assert_released(t, file, what):
    """No loop device on the image, no mount of it anywhere (the pod's bind, the staging mount)."""
    C.wait_for(f"{what}: loop device of {file} released", lambda: not t.loops_of(file), 120)
    with open("/proc/self/mountinfo") as f:
        left = [ln.split()[4] for ln in f if f"/{file.rsplit('.', 1)[0]}" in ln.split()[4]
                and ln.split()[4].startswith(kubelet_dir())]
    check(not left, f"{what}: mounts left: {left}")


def stage_mounts(t, file, handle):
    devs = t.loops_of(file)
    check(len(devs) == 1, f"one loop device on {file}, not {devs}")
    mnts = [m for m, _ in t.mounts_of(devs)]
    staged = [m for m in mnts if "/plugins/kubernetes.io/csi/" in m and m.endswith("/globalmount/" + handle)]
    pods = [m for m in mnts if "/volumes/kubernetes.io~csi/" in m and m.endswith("/mount")]
    check(staged, f"no staging mount of {devs[0]} (<staging path>/{handle}): {mnts}")
    check(pods, f"no pod mount of {devs[0]} (kubernetes.io~csi/.../mount): {mnts}")
    return devs[0], staged, pods


def claim_events(t, claim):
    r = t.k("get", "events", "-n", NS, "--field-selector",
            f"involvedObject.kind=PersistentVolumeClaim,involvedObject.name={claim}",
            "-o", "json", check=False)
    try:
        return [(e.get("type"), e.get("reason"), e.get("message")) for e in json.loads(r.stdout)["items"]]
    except (ValueError, KeyError):
        return []


# --- cases -----------------------------------------------------------------------------------------

def case_csi_register(t):
    """deploy/csi installed: kubelet registered loop.csi.flexvol (CSINode lists it, with the node's
    name as its ID and the topology key), the CSIDriver says attachRequired: false."""
    _setup(t)
    n = t.kj("get", "csinode", C.NODE)
    (d,) = [d for d in n["spec"]["drivers"] if d["name"] == DRIVER]
    # the node's name, not the pod's hostname (which would change at each rollout)
    check(d.get("nodeID") == C.NODE, f"node ID {d.get('nodeID')!r}, not the node's name {C.NODE}")
    check(f"topology.{DRIVER}/node" in (d.get("topologyKeys") or []), f"topology keys: {d}")
    node = t.kj("get", "node", C.NODE)
    check(node["metadata"]["labels"].get(f"topology.{DRIVER}/node") == d["nodeID"],
          f"node label topology.{DRIVER}/node: {node['metadata']['labels']}")
    cd = t.kj("get", "csidriver", DRIVER)
    check(cd["spec"]["attachRequired"] is False, f"CSIDriver: {cd['spec']}")


def case_csi_static_loop(t):
    """A static CSI PV of a loop image: the pod's volume is staged (loop device + mount under the
    staging path) and published (the pod's bind), data written; the pod deleted: unpublished and
    unstaged, nothing left (no loop device, no mount); a second pod reads the data back."""
    _setup(t)
    pv, file = "csi-static", "csi-static.img"
    csi_pv(t, pv, file)
    try:
        t.pod("csi-w", "echo CSI-STATIC > /data/f && sync && cat /data/f && sleep 3600", claim=pv)
        t.wait_pod("csi-w", timeout=120)
        t.wait_log("csi-w", "CSI-STATIC")
        check(os.path.isfile(t.backing(file)), f"image {t.backing(file)} not made")
        dev, staged, pods = stage_mounts(t, file, pv)
        t.delete_pod("csi-w")
        assert_released(t, file, "after the pod")
        check(not os.path.exists(staged[0]), f"staging dir {staged[0]} left")
        _read_back(t, lambda: t.pod("csi-r", "cat /data/f", claim=pv), "csi-r", "CSI-STATIC", file)
    finally:
        t.delete_pod("csi-w")
        t.delete_pod("csi-r")
        t.drop_pv(pv)
    os.unlink(t.backing(file))


def _read_back(t, make, name, marker, file):
    """make() starts pod @name, which prints what the volume holds: it ends with @marker in its
    log, and once it is deleted nothing of the volume is left on the node."""
    make()
    t.wait_pod(name, ("Succeeded",), timeout=120)
    check(marker in t.logs(name), f"read back: {t.logs(name)!r}")
    t.delete_pod(name)
    assert_released(t, file, "after the reader")


def case_csi_block_loop(t):
    """A static CSI PV of a loop image with volumeMode Block (issue 38.3): the pod sees
    /dev/xvda as a block device of the image's size and writes to it; the pod deleted: the
    loop device released (and the kubelet's own loop device pinning it), no bind of it left
    under the kubelet's dirs, the bytes in the image; a second pod reads them from the device."""
    _setup(t)
    pv, file, data = "csi-block", "csi-block.img", "FLEXVOL-RAW-BLOCK"
    csi_pv(t, pv, file, block=True)
    try:
        t.pod("csi-bw", f"test -b /dev/xvda && echo size=$(blockdev --getsize64 /dev/xvda) && "
              f"printf {data} > /dev/xvda && sync && echo WROTE && sleep 3600", claim=pv, block=True)
        t.wait_pod("csi-bw", timeout=120)
        t.wait_log("csi-bw", "WROTE")
        check(f"size={64 << 20}" in t.logs("csi-bw"), f"the device's size: {t.logs('csi-bw')!r}")
        devs = t.loops_of(file)
        check(len(devs) == 1, f"one loop device on {file}, not {devs}")
        check(not t.mounts_of(devs), f"a filesystem mounted from a raw block volume's device: {t.mounts_of(devs)}")
        t.delete_pod("csi-bw")
        assert_released(t, file, "after the pod")
        check(not C.kubelet_pins(), f"the kubelet's pin of the device left: {C.kubelet_pins()}")
        with open(t.backing(file), "rb") as f:
            check(f.read(len(data)) == data.encode(), "the written bytes are not at the image's start")
        _read_back(t, lambda: t.pod("csi-br", f"head -c {len(data)} /dev/xvda; echo", claim=pv, block=True), "csi-br",
                   data, file)
    finally:
        t.delete_pod("csi-bw")
        t.delete_pod("csi-br")
        t.drop_pv(pv)
    os.unlink(t.backing(file))


def _flex_write(t, pv, file, text):
    t.loop_pv(pv, file)
    t.pod(f"{pv}-w", f"echo {text} > /data/f && sync && cat /data/f && sleep 3600", claim=pv)
    t.wait_pod(f"{pv}-w", timeout=120)
    t.wait_log(f"{pv}-w", text)


def _stop_and_migrate(t, pv, file, rollback=False):
    """Stop the pod, migrate (or roll back) the PV, start the next pod: the downtime."""
    t0 = time.monotonic()
    t.delete_pod(f"{pv}-w")
    r = migrate_when_idle(t, pv, rollback)
    t_mig = time.monotonic()
    return t0, t_mig, r


def case_csi_migrate_loop(t):
    """Data written through FlexVolume (flexvol/loop) is read and extended through CSI after
    `flexvol-migrate`: refused while the pod runs; then the PV is a CSI PV of the same
    image under the same name, bound to the same claim (same uid) after Lost; the downtime (pod
    stop -> pod Running on the new PV) is measured."""
    _setup(t)
    pv, file = "csi-mig", "csi-mig.img"
    try:
        _flex_write(t, pv, file, "FLEX-DATA")
        claim_uid = t.kj("get", "pvc", pv, "-n", NS)["metadata"]["uid"]
        # in use: refused, nothing changed
        r = migrate(t, pv, check_rc=False)
        check(r.returncode == 3 and "is used by pod" in r.stderr, f"not refused: {r.returncode} {r.stderr}")
        p = t.kj("get", "pv", pv)
        check("flexVolume" in p["spec"] and p["spec"]["persistentVolumeReclaimPolicy"] == "Retain",
              f"PV changed by a refused migration: {p['spec']}")
        check(not os.path.exists(os.path.join(SAVE_DIR, pv + ".json")), "refused run saved a copy")
        t0, t_mig, r = _stop_and_migrate(t, pv, file)
        p = t.kj("get", "pv", pv)
        check(p["spec"].get("csi", {}).get("driver") == DRIVER and "flexVolume" not in p["spec"],
              f"not a CSI PV: {p['spec']}")
        check(p["spec"]["csi"]["volumeHandle"] == pv and
              p["spec"]["csi"]["volumeAttributes"].get("file") == file, f"csi: {p['spec']['csi']}")
        check(p["spec"]["claimRef"]["uid"] == claim_uid, "bound to another claim uid")
        c = t.kj("get", "pvc", pv, "-n", NS)
        check(c["metadata"]["uid"] == claim_uid and c["status"]["phase"] == "Bound", f"claim: {c['status']}")
        t.pod(f"{pv}-c", "cat /data/f && echo CSI-DATA >> /data/f && sync && cat /data/f && sleep 3600",
              claim=pv)
        t.wait_pod(f"{pv}-c", timeout=120)
        t_run = time.monotonic()
        log = t.wait_log(f"{pv}-c", "CSI-DATA")
        check(log.count("FLEX-DATA") == 2, f"FlexVolume data not read through CSI: {log!r}")
        stage_mounts(t, file, pv)
        ev = claim_events(t, pv)
        TIMES["migrate"] = (t_mig - t0, t_run - t0)
        print(f"     migrate {pv}: pod stop -> PV migrated {t_mig - t0:.1f} s, -> pod Running "
              f"{t_run - t0:.1f} s; claim events: {ev}; tool: {r.stdout.strip()!r}", flush=True)
        t.delete_pod(f"{pv}-c")
        assert_released(t, file, "after the CSI pod")
        # a second run has nothing to do
        r = migrate(t, pv)
        check("nothing to do" in r.stdout, f"second run: {r.stdout}")
    finally:
        t.delete_pod(f"{pv}-w")
        t.delete_pod(f"{pv}-c")
        t.drop_pv(pv)
    os.unlink(t.backing(file))


def case_csi_rollback_loop(t):
    """Migrated to CSI, extended there, rolled back (--rollback, from the saved copy): the
    FlexVolume PV is back under the same name and claim, and a FlexVolume pod reads both writes."""
    _setup(t)
    pv, file = "csi-back", "csi-back.img"
    try:
        _flex_write(t, pv, file, "FLEX-DATA")
        claim_uid = t.kj("get", "pvc", pv, "-n", NS)["metadata"]["uid"]
        _stop_and_migrate(t, pv, file)
        t.pod(f"{pv}-c", "echo CSI-DATA >> /data/f && sync && cat /data/f && sleep 3600", claim=pv)
        t.wait_pod(f"{pv}-c", timeout=120)
        t.wait_log(f"{pv}-c", "CSI-DATA")
        t0 = time.monotonic()
        t.delete_pod(f"{pv}-c")
        r = migrate_when_idle(t, pv, rollback=True)
        t_mig = time.monotonic()
        p = t.kj("get", "pv", pv)
        check(p["spec"].get("flexVolume", {}).get("driver") == "flexvol/loop" and "csi" not in p["spec"],
              f"not the FlexVolume PV: {p['spec']}")
        check(p["spec"]["claimRef"]["uid"] == claim_uid, "bound to another claim uid")
        t.pod(f"{pv}-f", "cat /data/f && sleep 3600", claim=pv)
        t.wait_pod(f"{pv}-f", timeout=120)
        t_run = time.monotonic()
        log = t.wait_log(f"{pv}-f", "CSI-DATA")
        check("FLEX-DATA" in log, f"FlexVolume data lost: {log!r}")
        TIMES["rollback"] = (t_mig - t0, t_run - t0)
        print(f"     rollback {pv}: pod stop -> PV rolled back {t_mig - t0:.1f} s, -> pod Running "
              f"{t_run - t0:.1f} s; claim events: {claim_events(t, pv)}; tool: {r.stdout.strip()!r}",
              flush=True)
        t.delete_pod(f"{pv}-f")
        C.wait_for("loop device released", lambda: not t.loops_of(file), 120)
    finally:
        for s in ("w", "c", "f"):
            t.delete_pod(f"{pv}-{s}")
        t.drop_pv(pv)
    os.unlink(t.backing(file))


def case_csi_migrate_mapping(t):
    """nfs and iscsi FlexVolume PVs (bound, never mounted: the lane has no NFS server or iSCSI
    target) are mapped to nfs.csi.flexvol and iscsi.csi.flexvol: volumeHandle = the PV name,
    volumeAttributes = the driver options, fsType and readOnly kept, the secret as the stage
    secret; claims stay bound by uid; rollback restores the saved PVs exactly (spec, policy)."""
    _setup(t)
    vols = {
        "csi-map-nfs": {"driver": "flexvol/nfs", "options": {"server": "192.0.2.1", "share": "/exports/a",
                                                             "nfsVersion": "4.2"}},
        "csi-map-iscsi": {"driver": "flexvol/iscsi", "fsType": "xfs", "readOnly": True,
                          "secretRef": {"name": "chap", "namespace": NS},
                          "options": {"targetPortal": "192.0.2.2:3260",
                                      "iqn": "iqn.2026-01.test:t1", "lun": "3"}},
    }
    # the shipped admission policy sends CHAP credentials only to listed portals
    portals = t.chap_portal_listed(vols["csi-map-iscsi"]["options"]["targetPortal"])
    try:
        for name, fv in vols.items():
            t.apply({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
                     "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                              "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "",
                              "flexVolume": fv}})
            t.apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                     "metadata": {"name": name, "namespace": NS},
                     "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                              "volumeName": name, "resources": {"requests": {"storage": "1Gi"}}}})
        for name, fv in vols.items():
            C.wait_for(f"claim {name} Bound", lambda: t.kj("get", "pvc", name, "-n", NS)
                       ["status"].get("phase") == "Bound", 60)
            uid = t.kj("get", "pvc", name, "-n", NS)["metadata"]["uid"]
            migrate(t, name)
            p = t.kj("get", "pv", name)["spec"]
            drv = fv["driver"].split("/")[1] + ".csi.flexvol"
            csi = p.get("csi", {})
            check(csi.get("driver") == drv and csi.get("volumeHandle") == name and
                  csi.get("volumeAttributes") == fv["options"], f"{name}: {csi}")
            check(csi.get("fsType") == fv.get("fsType") and csi.get("readOnly", False) == fv.get("readOnly", False),
                  f"{name}: fsType/readOnly {csi}")
            if "secretRef" in fv:
                check(csi.get("nodeStageSecretRef") == fv["secretRef"], f"{name}: secret {csi}")
            check(p["persistentVolumeReclaimPolicy"] == "Retain" and p["claimRef"]["uid"] == uid, f"{name}: {p}")
            migrate(t, name, rollback=True)
            p = t.kj("get", "pv", name)["spec"]
            check(p.get("flexVolume") == fv and p["persistentVolumeReclaimPolicy"] == "Delete" and
                  p["claimRef"]["uid"] == uid, f"{name} after rollback: {p}")
            C.wait_for(f"claim {name} Bound again", lambda: t.kj("get", "pvc", name, "-n", NS)
                       ["status"].get("phase") == "Bound", 60)
    finally:
        for name in vols:
            # Delete policy restored: the PV must not go to a recycler; Retain before deleting
            t.k("patch", "pv", name, "-p", '{"spec":{"persistentVolumeReclaimPolicy":"Retain"}}', check=False)
            t.drop_pv(name)
        t.chap_portals_restored(portals)


XFS_CLASS = "flexvol-csi-loop-xfs"


def _xfs_class(t):
    """The lane's xfs copy of deploy/csi/controller's class flexvol-csi-loop: root on these
    machines lacks CAP_SYS_RESOURCE, which ext4's online resize needs ("resize2fs: Permission
    denied to resize filesystem"); xfs_growfs does not. xfs needs at least 300Mi."""
    sc = t.kj("get", "storageclass", "flexvol-csi-loop")
    t.apply({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": XFS_CLASS},
             "provisioner": DRIVER, "volumeBindingMode": sc["volumeBindingMode"],
             "reclaimPolicy": "Delete", "allowVolumeExpansion": True,
             "parameters": dict(sc.get("parameters") or {}, **{"csi.storage.k8s.io/fstype": "xfs"})})


def case_csi_dynamic_loop(t):
    """Dynamic provisioning through CSI (deploy/csi/controller: external-provisioner in
    node-deployment mode): a claim of the class (its xfs copy) gets an image on the pod's node,
    data written, grown online (external-resizer, then NodeExpandVolume); the claim deleted:
    the image goes (reclaim Delete)."""
    _setup(t, "csi-controller")
    _xfs_class(t)
    name = "csi-dyn"
    img = None
    try:
        t.apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                 "metadata": {"name": name, "namespace": NS},
                 "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": XFS_CLASS,
                          "resources": {"requests": {"storage": "300Mi"}}}})
        t.pod(f"{name}-w", "echo DYN > /data/f && sync && cat /data/f && sleep 3600", claim=name)
        t.wait_pod(f"{name}-w", timeout=180)
        t.wait_log(f"{name}-w", "DYN")
        pvname = t.kj("get", "pvc", name, "-n", NS)["spec"]["volumeName"]
        pv = t.kj("get", "pv", pvname)["spec"]
        check(pv["csi"]["driver"] == DRIVER, f"not a CSI PV: {pv}")
        img = t.backing(pv["csi"]["volumeHandle"] + ".img")
        check(os.path.isfile(img), f"no image {img}")

        def df_kib():
            return int(t.k("exec", "-n", NS, f"{name}-w", "--", "df", "-k", "/data").stdout.split()[-5])
        before = df_kib()
        t.k("patch", "pvc", name, "-n", NS, "-p", '{"spec":{"resources":{"requests":{"storage":"400Mi"}}}}')
        try:
            C.wait_for("claim grown to 400Mi", lambda: t.kj("get", "pvc", name, "-n", NS)["status"]
                       .get("capacity", {}).get("storage") == "400Mi", 120)
        except TimeoutError as e:
            raise CaseFailed(f"{e}: {t.kj('get', 'pvc', name, '-n', NS)['status'].get('conditions')}")
        # compared with df before: xfs's internal log (64 MiB here) is not in df's size, the
        # 100 MiB added are
        C.wait_for("the mounted filesystem grown by 100 MiB", lambda: df_kib() - before >= 100 * 1024, 60)
    finally:
        t.delete_pod(f"{name}-w")
        t.delete("pvc", name)
        t.k("delete", "storageclass", XFS_CLASS, "--ignore-not-found", check=False)
    if img:
        C.wait_for(f"image {img} removed", lambda: not os.path.exists(img), 120)


PV_FINALIZER = "external-provisioner.volume.kubernetes.io/finalizer"


def case_csi_migrate_reclaim_loop(t):
    """A loop PV as flexvol-provisioner makes it (named pvc-<uid>, provisioned-by flexvol/loop,
    its finalizer, policy Delete, pinned by hostname), written through FlexVolume; no
    flexvol-provisioner runs here, which would drop that finalizer: flexvol-migrate removes it itself
    and finishes; the CSI PV is loop.csi.flexvol's (annotation, a node selector term on its
    topology key), read through CSI; set to Delete and its claim deleted, the external-provisioner
    of deploy/csi/controller on the node reclaims it through flexvol-csi's DeleteVolume: the
    image and the PV gone, nothing left."""
    _setup(t, "csi-controller")
    pv, claim = "pvc-" + str(uuid.uuid4()), "csi-recl"
    file = pv + ".img"
    img = t.backing(file)
    try:
        t.apply({"apiVersion": "v1", "kind": "PersistentVolume",
                 "metadata": {"name": pv, "finalizers": [PV_FINALIZER], "labels": {"flexvol/node": C.NODE},
                              "annotations": {"pv.kubernetes.io/provisioned-by": "flexvol/loop"}},
                 "spec": {"capacity": {"storage": "64Mi"}, "accessModes": ["ReadWriteOnce"],
                          "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "",
                          "flexVolume": {"driver": "flexvol/loop", "fsType": "ext4",
                                         "options": {"file": file, "size": "64Mi"}},
                          "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                              {"key": "kubernetes.io/hostname", "operator": "In", "values": [C.NODE]}]}]}}}})
        t.apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim, "namespace": NS},
                 "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": pv,
                          "resources": {"requests": {"storage": "64Mi"}}}})
        C.wait_for(f"claim {claim} Bound", lambda: t.kj("get", "pvc", claim, "-n", NS)
                   ["status"].get("phase") == "Bound", 60)
        t.pod(f"{claim}-w", "echo FLEX-RECL > /data/f && sync && cat /data/f && sleep 3600", claim=claim)
        t.wait_pod(f"{claim}-w", timeout=120)
        t.wait_log(f"{claim}-w", "FLEX-RECL")
        t.delete_pod(f"{claim}-w")
        migrate_when_idle(t, pv)
        p = t.kj("get", "pv", pv)
        check(p["metadata"]["annotations"].get("pv.kubernetes.io/provisioned-by") == DRIVER,
              f"provisioned-by: {p['metadata'].get('annotations')}")
        terms = p["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
        check({"matchExpressions": [{"key": f"topology.{DRIVER}/node", "operator": "In", "values": [C.NODE]}]}
              in terms, f"node affinity: {terms}")
        t.pod(f"{claim}-c", "cat /data/f", claim=claim)
        t.wait_pod(f"{claim}-c", ("Succeeded",), timeout=120)
        check("FLEX-RECL" in t.logs(f"{claim}-c"), f"read through CSI: {t.logs(f'{claim}-c')!r}")
        t.delete_pod(f"{claim}-c")
        assert_released(t, file, "after the CSI pod")
        t.k("patch", "pv", pv, "-p", '{"spec":{"persistentVolumeReclaimPolicy":"Delete"}}')
        try:
            C.wait_for("external-provisioner's finalizer on the CSI PV", lambda: PV_FINALIZER in (
                t.kj("get", "pv", pv)["metadata"].get("finalizers") or []), 60)
        except TimeoutError as e:
            raise CaseFailed(f"{e}: external-provisioner's log: {node_logs(t, 'csi-provisioner')}")
        t0 = time.monotonic()
        t.delete("pvc", claim)
        try:
            C.wait_for(f"PV {pv} reclaimed", lambda: t.k("get", "pv", pv, check=False).returncode != 0, 120)
        except TimeoutError as e:
            logs = node_logs(t, "csi-provisioner")
            raise CaseFailed(f"{e}: {t.k('get', 'pv', pv, '-o', 'yaml', check=False).stdout}\n{logs}")
        check(not os.path.exists(img), f"image {img} left")
        print(f"     {pv}: claim deleted -> image and PV gone through CSI in {time.monotonic() - t0:.1f} s",
              flush=True)
    finally:
        # what a failure left, gone without masking it: Retain, then no finalizer can hold the PV
        t.delete_pod(f"{claim}-w")
        t.delete_pod(f"{claim}-c")
        t.k("delete", "pvc", claim, "-n", NS, "--ignore-not-found", "--wait=false", check=False)
        if t.k("get", "pv", pv, check=False).returncode == 0:
            t.k("patch", "pv", pv, "-p", '{"spec":{"persistentVolumeReclaimPolicy":"Retain"}}', check=False)
            t.k("delete", "pv", pv, "--ignore-not-found", "--wait=false", check=False)
            t.k("patch", "pv", pv, "--type=merge", "-p", '{"metadata":{"finalizers":null}}', check=False)
        try:
            C.wait_for(f"PV {pv} and claim {claim} gone", lambda: t.k("get", "pv", pv, check=False)
                       .returncode != 0 and t.k("get", "pvc", claim, "-n", NS, check=False).returncode != 0, 60)
        except TimeoutError as e:
            print(f"     cleanup: {e}", flush=True)
        if os.path.exists(img):
            os.unlink(img)


# Kubernetes' external storage e2e suites through CSI (make check-kube-csi-e2e): every suite for
# loop.csi.flexvol that needs no disruption and no second node, with the snapshot specs
# ([Feature:VolumeSnapshotDataSource]: snapshots, restores) but no other optional feature
# (e2e_suites.SKIP_CSI), nor the immediate-binding patterns: a loop volume lives on the node
# the scheduler picks (the class is WaitForFirstConsumer), nor the pre-provisioned snapshot
# patterns: their VolumeSnapshotContent, made by the suite, has no `managed-by` label, and with
# distributed snapshotting (each node's csi-snapshotter takes its own node's contents only) no
# csi-snapshotter ever takes it (docs/migration.md says an operator's must carry it; the run of
# 2026-12-07: "VolumeSnapshot pre-provisioned-snapshot-... is not ready within 5m0s").
# FLEXVOL_E2E_FOCUS/SKIP override.
E2E_FOCUS = r"External.Storage.*loop.csi.flexvol"
E2E_SKIP = E2E.SKIP_CSI + r"|immediate.binding|Pre-provisioned.Snapshot"


def case_csi_e2e_loop(t):
    """Kubernetes' external storage e2e suites (tests/kube/e2e/test-driver-csi-loop.yaml)
    against loop.csi.flexvol: deploy/csi with deploy/csi/controller, deploy/csi/snapshot (the
    VolumeSnapshotClass flexvol-csi-loop) and deploy/csi/capacity, the class flexvol-csi-loop
    with xfs. The summary and every failed spec are printed, the JUnit report kept in
    build/kube-e2e-csi/."""
    import cases_csi_snapshot  # its install: the CRDs, then the lane's csi-snapshot overlay
    cases_csi_snapshot._setup(t)
    E2E.import_images(lambda *a: t.cl.ctr(*a, timeout=300), os.environ["FLEXVOL_E2E_DIR"])
    _xfs_class(t)
    try:
        rc, secs, log = E2E.run("test-driver-csi-loop.yaml", E2E_FOCUS, E2E_SKIP, "kube-e2e-csi")
    finally:
        t.k("delete", "storageclass", XFS_CLASS, "--ignore-not-found", check=False)
    print(f"     e2e suites through CSI: {secs:.0f} s", flush=True)
    check(rc == 0, f"e2e.test exit {rc}; log {log}")


CASES = []
if os.environ.get("FLEXVOL_KUBE_CSI") == "1":
    CASES = [case_csi_register, case_csi_static_loop, case_csi_block_loop, case_csi_migrate_loop,
             case_csi_rollback_loop, case_csi_migrate_mapping]
    # deploy/csi/controller's cases need its sidecars' images (KUBE_CSI_SIDECARS)
    if os.environ.get("FLEXVOL_KUBE_CSI_CONTROLLER", "1") == "1":
        CASES += [case_csi_dynamic_loop, case_csi_migrate_reclaim_loop]
        # the driver file declares snapshots, clones and capacity: the snapshotter's images too
        if os.environ.get("FLEXVOL_E2E_DIR") and os.environ.get("FLEXVOL_KUBE_CSI_SNAPSHOT") == "1":
            CASES.append(case_csi_e2e_loop)
