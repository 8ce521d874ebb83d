# SPDX-License-Identifier: Apache-2.0
"""Cluster-lane cases: the three shapes of an install (FlexVolume only, both, CSI only) and the
path from the first to the last (docs/migration.md, "Three shapes"), through the real kubelet,
API server and controller-manager. Only with FLEXVOL_KUBE_CSI=1 (`make check-kube-csi`; CI's
run with the registrar only runs them all: they need no controller sidecar).

csi_shape_own_rollout
    FlexVolume and CSI side by side: adding deploy/csi leaves the installer DaemonSet as it was
    (same generation, same pod); a CSI node DaemonSet whose registrar image cannot be had stalls
    its own rollout only: the installer's rollout restart completes meanwhile.
csi_shape_path_to_csi_only
    The path an operator takes, one step after the other: FlexVolume only (the lane's kubeadm
    install) with a loop volume written through FlexVolume; CSI installed beside (the installer
    untouched); every FlexVolume PV of the cluster moved to CSI (the lane's migrate command) and
    read through CSI; FlexVolume removed (FLEXVOL_UNINSTALL=1, rollout, the CSI-only
    kustomization tests/kube/overlays/csi-only applied, the installer's DaemonSet and
    ServiceAccount deleted): the CSI node plugin kept running through it (same pod), nothing of
    the FlexVolume side is left on the node (no flexvol~<driver> in kubelet's plugin directory,
    dot-named or not, no node config of the installer's, no installer pod, no flexvol driver
    call after the removal), the volume is written and read through CSI again, CSINode still lists
    loop.csi.flexvol. The lane's own install comes back at the end.
csi_shape_only_dynamic (with deploy/csi/controller's sidecars: not in CI's registrar-only run)
    CSI only with dynamic loop volumes: a claim provisioned, written and reclaimed through CSI
    with no FlexVolume installer on the node.
csi_shape_helm_only (not in CI's registrar-only run)
    CSI only from the Helm chart, the lane's paths and images as values only.
"""
import json
import os
import time

import cases_csi as CSI
import cluster as C
from run import HERE, NS, PLUGINS, CaseFailed, check

INSTALLER_DS = "flexvol-installer"


def _ds(t, name):
    r = t.k("-n", "kube-system", "get", "ds", name, "-o", "json", check=False)
    return json.loads(r.stdout) if r.returncode == 0 else None


def _pods(t, name):
    """{pod name: uid} of the DaemonSet @name's live pods."""
    items = t.kj("-n", "kube-system", "get", "pods", "-l", f"app.kubernetes.io/name={name}")["items"]
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in items if not p["metadata"].get("deletionTimestamp")}


def _flexvolume_only(t):
    """The lane's kubeadm install and no CSI side (what an earlier case installed beside it goes:
    no CSI volume is in use between cases)."""
    for kind, name in (("ds", CSI.NODE_DS), ("ds", "flexvol-csi-nfs-node"), ("ds", "flexvol-csi-iscsi-node"),
                       ("deploy", "flexvol-csi-controller")):
        t.k("-n", "kube-system", "delete", kind, name, "--ignore-not-found", "--wait=true", "--timeout=120s",
            check=False, timeout=150)
    t.k("delete", "csidriver", CSI.DRIVER, "--ignore-not-found", check=False)
    t.install("kubeadm")
    t.mode = "controller"


def _plugin_entries():
    """What of flexvol is in kubelet's FlexVolume plugin directory (flexvol~<drv>, or its
    uninstall's dot-name)."""
    return sorted(e for e in os.listdir(PLUGINS) if e.startswith(("flexvol~", ".flexvol~"))) \
        if os.path.isdir(PLUGINS) else []


def _remove_flexvolume(t, overlay):
    """The last step of the path (docs/migration.md): the FlexVolume drivers uninstalled
    (FLEXVOL_UNINSTALL=1, rollout), the CSI-only kustomization tests/kube/overlays/@overlay
    applied, the installer's DaemonSet and ServiceAccount deleted (kubectl apply deletes nothing)."""
    t.k("-n", "kube-system", "set", "env", f"ds/{INSTALLER_DS}", "FLEXVOL_UNINSTALL=1")
    t.rollout()
    d = C.p("csi-install", overlay)
    os.makedirs(d, exist_ok=True)
    C.write(os.path.join(d, "kustomization.yaml"), json.dumps({
        "resources": [os.path.relpath(os.path.join(HERE, "overlays", overlay), d)],
        "patches": [CSI.host_ns_patch(CSI.NODE_DS, "csi-loop")]}))
    t.k("apply", "-k", d, timeout=120)
    t.k("-n", "kube-system", "delete", "ds", INSTALLER_DS, "--wait=true", "--timeout=120s", timeout=150)
    t.k("-n", "kube-system", "delete", "serviceaccount", INSTALLER_DS, "--ignore-not-found")
    t.installed = overlay
    C.wait_for("the installer's pods gone", lambda: not _pods(t, INSTALLER_DS), 120)
    CSI.rollout_ds(t, CSI.NODE_DS)


def case_csi_shape_own_rollout(t):
    """FlexVolume and CSI side by side, each its own DaemonSet: deploy/csi added leaves the
    installer as it was; a registrar image that cannot be had stalls flexvol-csi-node's rollout
    only, the installer's own rollout (a restart) completes meanwhile; the CSI side mended."""
    _flexvolume_only(t)
    before = _ds(t, INSTALLER_DS)
    pods = _pods(t, INSTALLER_DS)
    CSI._setup(t)
    after = _ds(t, INSTALLER_DS)
    check(after["metadata"]["generation"] == before["metadata"]["generation"] and _pods(t, INSTALLER_DS) == pods,
          f"adding deploy/csi changed the installer: generation {before['metadata']['generation']} -> "
          f"{after['metadata']['generation']}, pods {pods} -> {_pods(t, INSTALLER_DS)}")
    bad = "localhost/flexvol/no-such-registrar:kube-test"
    try:
        t.k("-n", "kube-system", "set", "image", f"ds/{CSI.NODE_DS}", f"csi-registrar={bad}")

        def stalled():
            return any(cs.get("state", {}).get("waiting", {}).get("reason") in ("ErrImageNeverPull", "ErrImagePull",
                                                                                "ImagePullBackOff")
                       for p in t.kj("-n", "kube-system", "get", "pods", "-l",
                                     f"app.kubernetes.io/name={CSI.NODE_DS}")["items"]
                       for cs in p.get("status", {}).get("containerStatuses") or [])
        C.wait_for(f"{CSI.NODE_DS}'s new pod stuck on its image", stalled, 90)
        t0 = time.monotonic()
        t.k("-n", "kube-system", "rollout", "restart", f"ds/{INSTALLER_DS}")
        t.rollout()
        print(f"     the installer rolled out in {time.monotonic() - t0:.1f} s while {CSI.NODE_DS} "
              f"waits for {bad}", flush=True)
        r = t.k("-n", "kube-system", "rollout", "status", f"ds/{CSI.NODE_DS}", "--timeout=5s", check=False)
        check(r.returncode != 0, f"{CSI.NODE_DS} rolled out with an image that does not exist: {r.stdout}")
    finally:
        t.installed = None  # the overlay's apply puts the registrar's image back
        CSI._setup(t)


def case_csi_shape_path_to_csi_only(t):
    """FlexVolume only -> CSI beside -> every PV moved -> FlexVolume removed: CSI only, nothing
    of the FlexVolume side left on the node, the volume's data read and written through CSI."""
    _flexvolume_only(t)
    pv, file = "shape-path", "shape-path.img"
    try:
        check(_plugin_entries() == ["flexvol~iscsi", "flexvol~loop", "flexvol~nfs"],
              f"FlexVolume only: the plugin directory holds {_plugin_entries()}")
        CSI._flex_write(t, pv, file, "FLEX-PATH")
        t.delete_pod(f"{pv}-w")
        # 1. CSI beside FlexVolume: the installer untouched
        before, pods = _ds(t, INSTALLER_DS), _pods(t, INSTALLER_DS)
        CSI._setup(t)
        check(_ds(t, INSTALLER_DS)["metadata"]["generation"] == before["metadata"]["generation"] and
              _pods(t, INSTALLER_DS) == pods, "installing CSI beside changed the installer")
        # 2. every FlexVolume PV of the cluster moved to CSI
        flex = [p["metadata"]["name"] for p in t.kj("get", "pv")["items"]
                if (p["spec"].get("flexVolume") or {}).get("driver", "").startswith("flexvol/")]
        check(pv in flex, f"the FlexVolume PVs: {flex}")
        for name in flex:
            CSI.migrate_when_idle(t, name)
        left = [p["metadata"]["name"] for p in t.kj("get", "pv")["items"] if p["spec"].get("flexVolume")]
        check(not left, f"FlexVolume PVs left after the moves: {left}")
        t.pod(f"{pv}-c", "cat /data/f && echo CSI-PATH >> /data/f && sync && cat /data/f && sleep 3600", claim=pv)
        t.wait_pod(f"{pv}-c", timeout=120)
        log = t.wait_log(f"{pv}-c", "CSI-PATH")
        check(log.count("FLEX-PATH") == 2, f"FlexVolume data not read through CSI: {log!r}")
        t.delete_pod(f"{pv}-c")
        CSI.assert_released(t, file, "after the CSI pod")
        # 3. FlexVolume removed: uninstall mode, then the CSI-only kustomization, the installer deleted
        node_pods = _pods(t, CSI.NODE_DS)
        _remove_flexvolume(t, "csi-only")
        kpos = t.logpos()["kubelet"]
        # nothing of the FlexVolume side on the node
        check(_ds(t, INSTALLER_DS) is None, "the installer DaemonSet is still there")
        check(not _plugin_entries(), f"left in kubelet's plugin directory: {_plugin_entries()}")
        check(not os.path.exists(C.p("etc", "flexvol.conf")), "the installer's node config is still on the node")
        check(_pods(t, CSI.NODE_DS) == node_pods, f"the CSI node plugin was restarted by the removal: "
              f"{node_pods} -> {_pods(t, CSI.NODE_DS)}")
        n = t.kj("get", "csinode", C.NODE)
        check(any(x["name"] == CSI.DRIVER for x in n["spec"].get("drivers") or []), f"CSINode: {n['spec']}")
        # the volume through CSI, CSI only
        t.pod(f"{pv}-o", "cat /data/f && echo CSI-ONLY >> /data/f && sync && cat /data/f && sleep 3600", claim=pv)
        t.wait_pod(f"{pv}-o", timeout=120)
        log = t.wait_log(f"{pv}-o", "CSI-ONLY")
        check("FLEX-PATH" in log and "CSI-PATH" in log, f"data lost on the way: {log!r}")
        CSI.stage_mounts(t, file, pv)
        t.delete_pod(f"{pv}-o")
        CSI.assert_released(t, file, "CSI only, after the pod")
        calls = [o for o in t.ops("kubelet", kpos) if o["driver"] in ("loop", "nfs", "iscsi")]
        check(not calls, f"FlexVolume driver calls after the removal: {calls[:5]}")
    finally:
        for s in ("w", "c", "o"):
            t.delete_pod(f"{pv}-{s}")
        t.drop_pv(pv)
        if os.path.exists(t.backing(file)):
            os.unlink(t.backing(file))
        # the lane's own install again, for the cases after this one
        t.installed = None
        t.install("kubeadm")
        t.mode = "controller"


def case_csi_shape_only_dynamic(t):
    """CSI only with deploy/csi/controller (tests/kube/overlays/csi-only-controller: the
    installer removed as in the path): a claim of the class flexvol-csi-loop is provisioned on the
    pod's node by external-provisioner in flexvol-csi-node, written and read, and its image goes
    with the claim; no FlexVolume driver on the node throughout."""
    _flexvolume_only(t)
    _remove_flexvolume(t, "csi-only-controller")
    CSI.rollout_ds(t, CSI.NODE_DS)
    r = t.k("-n", "kube-system", "rollout", "status", "deploy/flexvol-csi-controller", "--timeout=180s",
            check=False, timeout=210)
    check(r.returncode == 0, f"flexvol-csi-controller: {r.stderr.strip()}")
    name, img = "shape-dyn", None
    try:
        check(not _plugin_entries(), f"CSI only, yet in kubelet's plugin directory: {_plugin_entries()}")
        t.apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": NS},
                 "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "flexvol-csi-loop",
                          "resources": {"requests": {"storage": "64Mi"}}}})
        t.pod(f"{name}-w", "echo DYN-ONLY > /data/f && sync && cat /data/f && sleep 3600", claim=name)
        try:
            t.wait_pod(f"{name}-w", timeout=180)
        except CaseFailed as e:
            raise CaseFailed(f"{e}: {CSI.node_logs(t, 'csi-provisioner')}")
        t.wait_log(f"{name}-w", "DYN-ONLY")
        pv = t.kj("get", "pv", t.kj("get", "pvc", name, "-n", NS)["spec"]["volumeName"])
        check(pv["spec"]["csi"]["driver"] == CSI.DRIVER, f"not a CSI PV: {pv['spec']}")
        img = t.backing(pv["spec"]["csi"]["volumeHandle"] + ".img")
        check(os.path.isfile(img), f"no image {img}")
    finally:
        t.delete_pod(f"{name}-w")
        t.delete("pvc", name)
    if img:
        C.wait_for(f"image {img} removed with its claim", lambda: not os.path.exists(img), 120)
    check(not _plugin_entries(), f"CSI only, yet in kubelet's plugin directory: {_plugin_entries()}")
    t.installed = None
    t.install("kubeadm")
    t.mode = "controller"


def case_csi_shape_helm_only(t):
    """CSI only from the Helm chart (installer.enabled=false, csi.loop.enabled) on a node where
    the lane's FlexVolume install was uninstalled: values alone give the lane's kubelet directory,
    node configuration, host namespaces and images; no installer, nothing in kubelet's plugin
    directory, NOTES.txt names what runs; a static CSI volume written and read; helm uninstall
    removes it all."""
    import cases_release as REL
    _flexvolume_only(t)
    t.k("-n", "kube-system", "set", "env", f"ds/{INSTALLER_DS}", "FLEXVOL_UNINSTALL=1")
    t.rollout()
    t.k("delete", "-k", os.path.join(HERE, "overlays", "kubeadm"), "--wait=true", "--ignore-not-found", timeout=180)
    t.installed, t.mode = None, None
    check(not _plugin_entries(), f"the lane's drivers not uninstalled: {_plugin_entries()}")
    chart = os.path.join(C.ROOT, "deploy", "helm", "flexvol")
    img = ["--set", "image.repository=localhost/flexvol/installer", "--set", "image.tag=kube-test",
           "--set", "image.pullPolicy=Never",
           "--set", "sidecars.nodeDriverRegistrar.repository=localhost/flexvol/csi-node-driver-registrar",
           "--set", "sidecars.nodeDriverRegistrar.tag=kube-test", "--set", "sidecars.nodeDriverRegistrar.pullPolicy=Never"]
    conf = ["--set", f"kubeletDir={C.p('kubelet')}", "--set", "csi.hostNamespaceProcess=kubelet",
            "--set", f"nodeConfig.loop_root={C.p('flexvol', 'loop')}",
            "--set", f"nodeConfig.state_dir={C.p('flexvol', 'state')}",
            "--set", f"nodeConfig.run_dir={C.RUN}/flexvol", "--set", f"nodeConfig.log_file={C.p('log', 'csi-helm.log')}",
            "--set", "nodeConfig.debug=true"]
    pv, file = "shape-helm", "shape-helm.img"
    try:
        out = REL._helm(t, "install", "flexvol", chart, "-n", "kube-system", "--set", "installer.enabled=false",
                        "--set", "csi.loop.enabled=true", *img, *conf, "--wait", "--timeout", "4m")
        notes = out.split("NOTES:", 1)[-1]
        check("flexvol-csi-node" in notes and "flexvol-installer" not in notes.replace("No FlexVolume installer", ""),
              f"NOTES.txt: {notes[-600:]}")
        CSI.rollout_ds(t, CSI.NODE_DS)
        check(_ds(t, INSTALLER_DS) is None, "an installer DaemonSet with installer.enabled=false")
        pods = t.kj("-n", "kube-system", "get", "pods", "-l", "app.kubernetes.io/instance=flexvol")["items"]
        check(pods and all(p["metadata"]["labels"].get("app.kubernetes.io/managed-by") == "Helm" for p in pods),
              f"the release's pods by its labels: {[p['metadata']['name'] for p in pods]}")
        C.wait_for(f"{CSI.DRIVER} in CSINode {C.NODE}", lambda: any(
            x["name"] == CSI.DRIVER for x in t.kj("get", "csinode", C.NODE)["spec"].get("drivers") or []), 120)
        CSI.csi_pv(t, pv, file)
        t.pod(f"{pv}-w", "echo HELM-CSI > /data/f && sync && cat /data/f && sleep 3600", claim=pv)
        t.wait_pod(f"{pv}-w", timeout=120)
        t.wait_log(f"{pv}-w", "HELM-CSI")
        CSI.stage_mounts(t, file, pv)
        t.delete_pod(f"{pv}-w")
        CSI.assert_released(t, file, "after the pod")
        check(not _plugin_entries(), f"CSI only, yet in kubelet's plugin directory: {_plugin_entries()}")
        check(os.path.isfile(C.p("log", "csi-helm.log")), "flexvol-csi did not log where nodeConfig.log_file says")
    finally:
        t.delete_pod(f"{pv}-w")
        t.drop_pv(pv)
        if os.path.exists(t.backing(file)):
            os.unlink(t.backing(file))
        try:
            REL._helm(t, "uninstall", "flexvol", "-n", "kube-system", "--wait", "--timeout", "3m")
        finally:
            t.install("kubeadm")
            t.mode = "controller"
    check(_ds(t, CSI.NODE_DS) is None, "flexvol-csi-node left after helm uninstall")


if os.environ.get("FLEXVOL_KUBE_CSI") == "1":
    CASES = [case_csi_shape_own_rollout, case_csi_shape_path_to_csi_only]
    # deploy/csi/controller's sidecars (KUBE_CSI_SIDECARS with provisioner)
    # outside CI's registrar-only run (make check-kube-csi-shapes): the CSI-only dynamic case needs
    # deploy/csi/controller's sidecars; the Helm one is left out there for time
    if os.environ.get("FLEXVOL_KUBE_CSI_CONTROLLER", "1") == "1":
        CASES += [case_csi_shape_only_dynamic, case_csi_shape_helm_only]
else:
    CASES = []
