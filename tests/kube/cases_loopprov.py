# SPDX-License-Identifier: Apache-2.0
"""Cluster-lane cases: dynamic flexvol/loop volumes (docs/loop-provisioning.md) through the real
API server, scheduler (WaitForFirstConsumer), controller-manager (PV binder), kubelet (mount,
online node expansion through the driver's expandfs) and the node agent in the installer DaemonSet.

deploy/loop is applied as it is, with what this single-node, registry-less cluster needs
changed: the locally imported image with imagePullPolicy: Never, the host network and
KUBERNETES_SERVICE_HOST/PORT on 127.0.0.1 (no kube-proxy), and the lane's loop root
(FLEXVOL_LOOP_ROOT of the drivers, tests/kube/cluster.py) for the agent's hostPath and
--loop-root.  The provisioner is deploy/loop's (provisioner.yaml, with cases_provisioner.deploy's
lane changes).
"""
import json
import os
import time

import cases_provisioner as P
import cluster as C
import e2e_suites as E2E
from run import INSTALLER, NS, CaseFailed, check

LOOP_DIR = os.path.join(C.ROOT, "deploy", "loop")
LOOP_ROOT = C.p("flexvol", "loop")
SC = "flexvol-loop"
SC_RETAIN = "flexvol-loop-retain"
# Online growth of ext4 (EXT4_IOC_RESIZE_FS) needs CAP_SYS_RESOURCE, which this build host's
# root lacks (kube-lane facts: runc cannot set oom_score_adj for the same reason), so kubelet's
# expandfs through the driver fails there with "Permission denied to resize filesystem" while it
# works on a real node.  xfs_growfs needs CAP_SYS_ADMIN only: the expansion case and the e2e
# suites use an xfs class, the same class as deploy/loop's but for its fsType.
SC_XFS = "flexvol-loop-xfs"
MiB = 1024 * 1024


def _setup(t):
    if getattr(t, "loopprov", False) and t.installed == "kubeadm":
        return
    if t.installed != "kubeadm":
        t.install("kubeadm")
        t.mode = "controller"
    objs = P._objs(t, os.path.join(LOOP_DIR, "rbac.yaml")) + \
        P._objs(t, os.path.join(LOOP_DIR, "storageclass.yaml"))
    for o in list(objs):  # a copy: the Retain and xfs classes are appended to objs
        if o["kind"] == "StorageClass":
            r = json.loads(json.dumps(o))
            r["metadata"]["name"] = SC_RETAIN
            r["reclaimPolicy"] = "Retain"
            objs.append(r)
            x = json.loads(json.dumps(o))
            x["metadata"]["name"] = SC_XFS
            # by the CSI key: the e2e suites' (ext4) patterns set that key on a copy of this
            # class, and a class with both keys is refused (as the CSI external-provisioner does)
            del x["parameters"]["fsType"]
            x["parameters"]["csi.storage.k8s.io/fstype"] = "xfs"
            objs.append(x)
    t.k("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
    # the DaemonSet patch of deploy/loop, with the lane's changes
    (patch,) = P._objs(t, os.path.join(LOOP_DIR, "daemonset-agent.yaml"))
    spec = patch["spec"]["template"]["spec"]
    spec["hostNetwork"] = True
    ct = spec["containers"][0]
    ct["image"] = INSTALLER
    ct["imagePullPolicy"] = "Never"
    ct["args"] = [a if not a.startswith("--loop-root=") else "--loop-root=" + LOOP_ROOT
                  for a in ct["args"]] + ["--interval=2"]
    ct["env"] += [{"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
                  {"name": "KUBERNETES_SERVICE_PORT", "value": "6443"}]
    for m in ct["volumeMounts"]:
        if m["name"] == "loop-root":
            m["mountPath"] = LOOP_ROOT
    for v in spec["volumes"]:
        if v["name"] == "loop-root":
            v["hostPath"]["path"] = LOOP_ROOT
    t.k("-n", "kube-system", "patch", "ds", "flexvol-installer", "--type=strategic", "-p",
        json.dumps(patch))
    t.rollout()
    P.deploy(t, files=[os.path.join(LOOP_DIR, "provisioner.yaml")])
    C.wait_for("the node agent's report", lambda: t.k("-n", "flexvol-loop", "get", "cm", C.NODE,
                                                     check=False).returncode == 0, 60, 1)
    t.loopprov = True


def _claim(t, name, size, sc=SC):
    t.apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": name, "namespace": NS},
             "spec": {"storageClassName": sc, "accessModes": ["ReadWriteOnce"],
                      "resources": {"requests": {"storage": size}}}})


def _pvc(t, name):
    return t.kj("get", "pvc", name, "-n", NS)


def _events(t, name):
    return t.k("get", "events", "-n", NS, "--field-selector", f"involvedObject.name={name}",
               "-o", "jsonpath={range .items[*]}{.reason}: {.message}{'\\n'}{end}").stdout


def _image(t, claim):
    return os.path.join(LOOP_ROOT, "pvc-%s.img" % _pvc(t, claim)["metadata"]["uid"])


def _exec(t, pod, cmd, check_rc=True):
    return t.k("exec", "-n", NS, pod, "--", "/bin/sh", "-c", cmd, check=check_rc)


WRITER = ("i=0; while true; do echo line-$i >> /data/log; i=$((i+1)); sync; sleep 0.2; done")


def case_loopprov_provision_write_expand_delete(t):
    """A claim of deploy/loop's class: provisioned for the node the scheduler picked (a PV with
    nodeAffinity, pvc-<uid>.img made by the node agent, owner = the PV), bound, a pod writes and
    cannot write past the size; the claim grown by an edit while the pod writes (online: the
    same pod, kubelet's expandfs through the driver); deleted: the image goes from the node."""
    _setup(t)
    _claim(t, "lp-data", "320Mi", sc=SC_XFS)  # xfs: 300 MB at least
    t.pod("lp-writer", WRITER, claim="lp-data")
    t.wait_pod("lp-writer")
    pvc = _pvc(t, "lp-data")
    pv = t.kj("get", "pv", pvc["spec"]["volumeName"])
    check(pv["spec"]["flexVolume"]["driver"] == "flexvol/loop", f"PV {pv['spec']}")
    terms = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]
    check(terms["key"] == "kubernetes.io/hostname" and terms["values"] == [C.NODE], f"affinity {terms}")
    img = _image(t, "lp-data")
    check(os.path.isfile(img) and os.path.getsize(img) == 320 * MiB, f"image {img}")
    check(os.getxattr(img, "trusted.flexvol.owner").decode() == pv["metadata"]["name"],
          "owner record of the image")
    # exactly the claimed size: a pod cannot write past it
    # (the lane's busybox has no dd: head -c writes the 500 MiB)
    r = _exec(t, "lp-writer", "head -c 524288000 /dev/zero > /data/fill; echo rc=$?; df -k /data",
              check_rc=False)
    # the write fails when the filesystem is full (busybox head says "I/O error" or "No space
    # left"); the filesystem is the image's, of the claimed size
    check("rc=0" not in r.stdout and " 100% /data" in r.stdout,
          f"wrote past 320Mi: {r.stdout} {r.stderr}")
    _exec(t, "lp-writer", "rm -f /data/fill")
    uid = t.kj("get", "pod", "lp-writer", "-n", NS)["metadata"]["uid"]
    pos = t.logpos()
    # online expansion
    t.k("patch", "pvc", "lp-data", "-n", NS, "--type=merge", "-p",
        json.dumps({"spec": {"resources": {"requests": {"storage": "480Mi"}}}}))
    try:
        C.wait_for("the claim's capacity 480Mi", lambda: _pvc(t, "lp-data")["status"].get("capacity", {})
                   .get("storage") == "480Mi", 180, 2)
    except TimeoutError as e:
        raise CaseFailed(f"{e}: claim status {_pvc(t, 'lp-data')['status']}; events {_events(t, 'lp-data')}")
    t.wait_op("kubelet", "expandfs", pos, timeout=30)
    check(os.path.getsize(img) == 480 * MiB, f"image size {os.path.getsize(img)}")
    df = _exec(t, "lp-writer", "df -k /data | tail -1").stdout.split()
    check(int(df[1]) > 400 * 1024, f"filesystem not grown: {df}")
    pod = t.kj("get", "pod", "lp-writer", "-n", NS)
    check(pod["metadata"]["uid"] == uid and pod["status"]["containerStatuses"][0]["restartCount"] == 0,
          "the writer pod was restarted during the expansion")
    n0 = int(_exec(t, "lp-writer", "wc -l < /data/log").stdout)
    time.sleep(1)
    check(int(_exec(t, "lp-writer", "wc -l < /data/log").stdout) > n0, "the pod stopped writing")
    # shrink refused
    # delete: the node agent removes the image, then the PV
    t.delete_pod("lp-writer")
    t.delete("pvc", "lp-data")
    try:
        C.wait_for("image removed on the node", lambda: not os.path.exists(img), 120, 1)
        C.wait_for("PV deleted", lambda: t.k("get", "pv", pv["metadata"]["name"], check=False)
                   .returncode != 0, 60, 1)
    except TimeoutError as e:
        logs = t.k("-n", "kube-system", "logs", "ds/flexvol-installer", "-c", "loop-agent", "--tail=30",
                   check=False).stdout
        raise CaseFailed(f"{e}; agent log: {logs[-2000:]}")


def case_loopprov_capacity_refused(t):
    """A claim larger than the node's loop root: ProvisioningFailed naming the room, the claim
    handed back to the scheduler, no PV."""
    _setup(t)
    _claim(t, "lp-huge", "64Ti")
    t.pod("lp-huge-pod", "sleep 3600", claim="lp-huge")
    try:
        C.wait_for("ProvisioningFailed for lack of room", lambda: "has no room for" in _events(t, "lp-huge"),
                   120, 2)
        check(not _pvc(t, "lp-huge")["spec"].get("volumeName"), "a PV for a claim that cannot fit")
        check(t.pod_phase("lp-huge-pod") == "Pending", "the pod left Pending")
    finally:
        t.delete_pod("lp-huge-pod")
        t.delete("pvc", "lp-huge")


def case_loopprov_retain(t):
    """Retain: the claim deleted, the PV is Released and the image stays on the node."""
    _setup(t)
    _claim(t, "lp-keep", "32Mi", sc=SC_RETAIN)
    t.pod("lp-keep-w", "echo kept > /data/f && sync && echo DONE", claim="lp-keep")
    t.wait_pod("lp-keep-w", ("Succeeded",))
    img = _image(t, "lp-keep")
    pvname = _pvc(t, "lp-keep")["spec"]["volumeName"]
    t.delete_pod("lp-keep-w")
    t.delete("pvc", "lp-keep")
    try:
        C.wait_for("PV Released", lambda: t.kj("get", "pv", pvname)["status"].get("phase") == "Released",
                   60, 1)
        time.sleep(6)  # three passes of the agent
        check(os.path.isfile(img), "the retained image was removed")
    finally:
        t.delete("pv", pvname, ns=None)
        if os.path.exists(img):
            os.unlink(img)


CASES = [case_loopprov_provision_write_expand_delete, case_loopprov_capacity_refused,
         case_loopprov_retain]


# --- Kubernetes' external storage e2e suites ---------------------------------------------------

# make check-kube-e2e: every external suite for flexvol-loop that needs no optional feature, no
# disruption and no second node (e2e_suites.SKIP_ALWAYS), but the immediate-binding patterns: a
# flexvol/loop class must be WaitForFirstConsumer (the provisioner refuses Immediate: a loop
# volume lives on the node the scheduler picks).
# FLEXVOL_E2E_FOCUS/SKIP override; CI focuses on tests/kube/e2e/ci-focus.
E2E_FOCUS = r"External.Storage.*flexvol-loop"
E2E_SKIP = E2E.SKIP_ALWAYS + r"|immediate.binding"


def case_loopprov_e2e(t):
    """Kubernetes' external storage e2e suites (e2e.test of the pinned k8s.io/kubernetes,
    tests/kube/e2e/test-driver-loop.yaml) against deploy/loop's class; the summary and every
    failed spec are printed, the JUnit report kept in build/kube-e2e/."""
    _setup(t)
    E2E.import_images(lambda *a: t.cl.ctr(*a, timeout=300), os.environ["FLEXVOL_E2E_DIR"])
    rc, _, log = E2E.run("test-driver-loop.yaml", E2E_FOCUS, E2E_SKIP, "kube-e2e")
    check(rc == 0, f"e2e.test exit {rc}; log {log}")


if os.environ.get("FLEXVOL_E2E_DIR"):
    CASES.append(case_loopprov_e2e)
