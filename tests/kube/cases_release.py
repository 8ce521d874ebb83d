# SPDX-License-Identifier: Apache-2.0
"""Cluster-lane cases: what an operator combines, upgrades and installs (issue 26).

release_site_upgrade
    deploy/overlays/kubeadm with the components deploy/loop and deploy/provisioner, from a
    kustomization of the operator's kind (site(): resources, components, one `images:` entry),
    plus the lane's changes as patches at the same level (host network, the lane's host paths,
    the API server on 127.0.0.1, the share as a hostPath).  A pod uses a loop volume; the one
    `images:` entry moves to the v2 image (tests/kube/build-images: every driver with a marker)
    and the same `kubectl apply -k` runs: every container of the DaemonSet and of both
    provisioner Deployments runs v2 (spec and the kubelet's status), the gc and loop-agent
    containers hold the v2 drivers, the pod kept its volume and still writes.
release_policy_provisioned_pvs
    every PV the provisioner makes (tests/policy/provisioned.py: the real flexvol-provisioner
    against the fake API server, one class per class parameter of each backend), every CSI PV
    flexvol makes (tests/policy/csi_made.py: from the real flexvol-csi's CreateVolume answers
    for the CSI classes, as external-provisioner writes them, and each of those provisioner PVs
    moved to CSI by the real `flexvol-provisioner migrate`) is admitted by the real API server
    with the shipped policy (`kubectl create --dry-run=server`: admission runs in full, nothing
    is created).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import cluster as C
from cases_provisioner import HOST_PORTS
from run import HERE, INSTALLER, INSTALLER_V2, NS, CaseFailed, check

SITE = C.p("site")
LOOP_ROOT = C.p("flexvol", "loop")
SHARE = C.p("share")
MARK = b"flexvol-kube-upgrade-test\n"
API_ENV = [{"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
           {"name": "KUBERNETES_SERVICE_PORT", "value": "6443"}]


def site(image, components=("loop", "provisioner"), overlay="kubeadm"):
    """Write SITE/kustomization.yaml (JSON is YAML) and return its directory."""
    rel = os.path.relpath(os.path.join(C.ROOT, "deploy"), SITE)
    name, tag = image.rsplit(":", 1)
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet",
          "metadata": {"name": "flexvol-installer", "namespace": "kube-system"},
          "spec": {"template": {"spec": {
              "hostNetwork": True,
              "volumes": [{"name": "plugin-dir", "hostPath": {"path": C.p("plugins"), "type": "DirectoryOrCreate"}},
                          {"name": "etc-flexvol", "hostPath": {"path": C.p("etc"), "type": "DirectoryOrCreate"}}]
              + ([{"name": "loop-root", "hostPath": {"path": LOOP_ROOT, "type": "DirectoryOrCreate"}}]
                 if "loop" in components else []),
              "containers": [{"name": "loop-agent", "env": API_ENV,
                              "args": ["--node-agent", "--loop-root=" + LOOP_ROOT, "--interval=2"],
                              "volumeMounts": [{"name": "loop-root", "mountPath": LOOP_ROOT}]}]
              if "loop" in components else []}}}}
    patches = [{"patch": json.dumps(ds)}]
    for dep in (["flexvol-loop-provisioner"] if "loop" in components else []) + \
            (["flexvol-provisioner"] if "provisioner" in components else []):
        patches.append({"patch": json.dumps({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": dep, "namespace": "kube-system"},
            # on the host network of one node a surge pod cannot take its predecessor's port
            # (it stays Pending and the rollout never ends): the upgrade replaces the pod instead
            "spec": {"replicas": 1, "strategy": {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
                     "template": {"spec": {"hostNetwork": True, "containers": [
                {"name": "provisioner", "env": API_ENV}]}}}})})
    if "loop" in components and "provisioner" in components:
        # on the host network both Deployments cannot take port 8080 on the one node (the second
        # stays Pending: no free ports): deploy/loop's serves on its port of HOST_PORTS
        port = HOST_PORTS["flexvol-loop-provisioner"]
        patches.append({"target": {"kind": "Deployment", "name": "flexvol-loop-provisioner"}, "patch": json.dumps([
            {"op": "test", "path": "/spec/template/spec/containers/0/args/2", "value": "--http-endpoint=:8080"},
            {"op": "replace", "path": "/spec/template/spec/containers/0/args/2", "value": f"--http-endpoint=:{port}"},
            {"op": "test", "path": "/spec/template/spec/containers/0/ports/0/containerPort", "value": 8080},
            {"op": "replace", "path": "/spec/template/spec/containers/0/ports/0/containerPort", "value": port}])})
    if "provisioner" in components:  # no NFS client on this host: the share is a hostPath
        patches.append({"target": {"kind": "Deployment", "name": "flexvol-provisioner"}, "patch": json.dumps([
            {"op": "replace", "path": "/spec/template/spec/volumes/0",
             "value": {"name": "share", "hostPath": {"path": SHARE, "type": "DirectoryOrCreate"}}}])})
    k = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
         "resources": [f"{rel}/overlays/{overlay}"],
         "components": [f"{rel}/{c}" for c in components],
         "images": [{"name": "registry.example.com/flexvol/installer", "newName": name, "newTag": tag}],
         "patches": patches}
    os.makedirs(SITE, exist_ok=True)
    with open(os.path.join(SITE, "kustomization.yaml"), "w") as f:
        json.dump(k, f, indent=1)
    return SITE


def _containers(t):
    """{"<kind>/<name> <container>": (spec image, [status images of its pods])}"""
    out = {}
    for kind, name, sel in (("ds", "flexvol-installer", "app.kubernetes.io/name=flexvol-installer"),
                            ("deploy", "flexvol-loop-provisioner", "app.kubernetes.io/name=flexvol-loop-provisioner"),
                            ("deploy", "flexvol-provisioner", "app.kubernetes.io/name=flexvol-provisioner")):
        o = t.kj("-n", "kube-system", "get", kind, name)
        pods = t.kj("-n", "kube-system", "get", "pods", "-l", sel)["items"]
        for ct in o["spec"]["template"]["spec"]["containers"]:
            st = [cs.get("image") for p in pods if not p["metadata"].get("deletionTimestamp")
                  for cs in p.get("status", {}).get("containerStatuses", []) if cs["name"] == ct["name"]]
            out[f"{kind}/{name} {ct['name']}"] = (ct["image"], st)
    return out


def _rolled(t):
    t.rollout()
    for d in ("flexvol-loop-provisioner", "flexvol-provisioner"):
        r = t.k("-n", "kube-system", "rollout", "status", f"deploy/{d}", "--timeout=180s", check=False, timeout=200)
        if r.returncode != 0:
            raise CaseFailed(f"rollout of {d}: {r.stderr.strip()}")


def _same_image(image):
    """containerd may report the image by another reference of the same name (docker.io/...)."""
    return lambda s: s == image or s.endswith("/" + image) or s.split("/", 1)[-1] == image.split("/", 1)[-1]


def _drivers_in(t, container):
    pod = t.kj("-n", "kube-system", "get", "pods", "-l", "app.kubernetes.io/name=flexvol-installer")["items"]
    pod = [p for p in pod if not p["metadata"].get("deletionTimestamp")][0]["metadata"]["name"]
    r = subprocess.run([t.cl.b("kubectl"), "--kubeconfig", C.p("admin.kubeconfig"), "-n", "kube-system", "exec",
                        pod, "-c", container, "--", "/bin/cat", "/flexvol/bin/loop"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    return r.stdout


def case_release_site_upgrade(t):
    """kubeadm overlay + deploy/loop + deploy/provisioner from one kustomization; its one images:
    entry moved to v2 and re-applied while a pod uses a volume: every flexvol container runs v2,
    gc and the node agent hold the v2 drivers, the pod keeps its mount and writes."""
    t.k("apply", "-k", site(INSTALLER), timeout=120)
    t.installed, t.loopprov = "site", False
    try:
        _rolled(t)
        before = _containers(t)
        want = {"ds/flexvol-installer install", "ds/flexvol-installer gc", "ds/flexvol-installer loop-agent",
                "deploy/flexvol-loop-provisioner provisioner", "deploy/flexvol-provisioner provisioner"}
        check(set(before) == want, f"containers {sorted(before)}")
        check(all(i == INSTALLER for i, _ in before.values()), f"images before: {before}")
        pv = "rel-upg"
        t.loop_pv(pv, "rel-upg.img")
        t.pod("rel-upg-pod", "echo before > /data/f && echo BEFORE; sleep 3600", claim=pv)
        t.wait_pod("rel-upg-pod")
        t.wait_log("rel-upg-pod", "BEFORE")
        devs = t.loops_of("rel-upg.img")
        mounts = t.mounts_of(devs)
        check(devs and mounts, "volume not mounted before the upgrade")
        # the upgrade: one entry, one command
        t.k("apply", "-k", site(INSTALLER_V2), timeout=120)
        _rolled(t)
        after = _containers(t)
        same = _same_image(INSTALLER_V2)
        bad = {k: v for k, v in after.items() if v[0] != INSTALLER_V2 or not v[1] or not all(same(s) for s in v[1])}
        check(not bad, f"containers not on {INSTALLER_V2}: {bad}")
        for ct in ("gc", "loop-agent", "install"):
            check(_drivers_in(t, ct).endswith(MARK), f"container {ct} does not hold the v2 drivers")
        with open(os.path.join(C.p("plugins"), "flexvol~loop", "loop"), "rb") as f:
            check(f.read().endswith(MARK), "the installed driver is not v2's")
        check(t.pod_phase("rel-upg-pod") == "Running", "the pod did not survive the upgrade")
        check(t.mounts_of(devs) == mounts, f"mounts changed during the upgrade: {t.mounts_of(devs)}")
        r = t.k("exec", "rel-upg-pod", "-n", NS, "--", "/bin/sh", "-c", "echo after >> /data/f && cat /data/f",
                check=False)
        check(r.returncode == 0 and "after" in r.stdout, f"pod cannot write after the upgrade: {r.stdout} {r.stderr}")
        t.delete_pod("rel-upg-pod")
        C.wait_for("loop device released", lambda: not t.loops_of("rel-upg.img"), 60)
        t.drop_pv(pv)
    finally:
        # back to the lane's install (its apply drops the agent container it never declared)
        for d in ("flexvol-loop-provisioner", "flexvol-provisioner"):
            t.k("-n", "kube-system", "delete", "deploy", d, "--ignore-not-found", "--wait=true", check=False)
        t.install("kubeadm")
        t.mode = "controller"
        shutil.rmtree(SITE, ignore_errors=True)


def case_release_policy_provisioned_pvs(t):
    """Every PV the provisioner makes (each backend, each class parameter, by the real binary
    against the fake API server), every CSI PV of flexvol-csi's CreateVolume and every one of
    those moved to CSI by migrate pass the shipped policy in the real API server."""
    sys.path.insert(0, os.path.join(C.ROOT, "tests", "policy"))
    import csi_made
    import provisioned
    # the image's binaries (check-kube builds them; the dynamic build/ may not exist yet)
    static = os.path.join(C.ROOT, "build", "static")
    pvs = provisioned.make(static)
    check(len(pvs) >= 10, f"only {len(pvs)} PVs made")
    made = csi_made.provisioned(static)
    check(len(made) >= 3, f"only {len(made)} CSI PVs made")
    moved = csi_made.migrated(static, pvs)
    check(len(moved) == len(pvs), f"only {len(moved)} of {len(pvs)} PVs migrated")
    pvs = dict(pvs, **{"CSI " + k: v for k, v in made.items()}, **{"migrated " + k: v for k, v in moved.items()})
    bad = {}
    for name, pv in sorted(pvs.items()):
        pv = json.loads(json.dumps(pv))
        pv["metadata"].pop("namespace", None)
        pv.get("spec", {}).pop("claimRef", None)
        r = t.k("create", "--dry-run=server", "-f", "-", input=json.dumps(pv), check=False)
        if r.returncode != 0:
            bad[name] = r.stderr.strip()[-300:]
    check(not bad, f"refused by the API server: {bad}")



def _helm(t, *args, timeout=300):
    helm = subprocess.run([os.path.join(C.ROOT, "tests", "kube", "build-helm")], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=1800)
    if helm.returncode != 0:
        raise CaseFailed(f"tests/kube/build-helm: {helm.stderr[-500:]}")
    r = subprocess.run([helm.stdout.strip().splitlines()[-1], "--kubeconfig", C.p("admin.kubeconfig"), *args],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    if r.returncode != 0:
        raise CaseFailed(f"helm {' '.join(args[:2])}: {r.stderr.strip()[-800:]}")
    return r.stdout


def _lane_uninstalled(t):
    """The lane's kustomize install removed (its objects would not be the chart's); the drivers stay."""
    if t.installed:
        # the DaemonSet's pods go after it (background deletion): waited for, so that the next
        # install's pods are the only ones its selector matches (an old pod, still terminating,
        # answered `kubectl logs ds/...` for the next DaemonSet in CI of stop 42). Not
        # --cascade=foreground: that marks every object first (the admission policy's generation
        # goes up), and the API server's policy status controller, late, then wrote that
        # generation as observed onto the chart's new policy of the same name: helm's --wait
        # never saw it ready
        t.k("delete", "-k", os.path.join(HERE, "overlays", t.installed), "--wait=true", "--ignore-not-found",
            timeout=180)
        C.wait_for("the lane's installer pods to go", lambda: not t.kj(
            "-n", "kube-system", "get", "pods", "-l", "app.kubernetes.io/name=flexvol-installer")["items"], 120, 1)
    t.installed, t.mode = None, None


def _lane_reinstalled(t):
    """The lane's own install again, for the cases after this one."""
    t.install("kubeadm")
    t.mode = "controller"


def case_release_helm(t):
    """deploy/helm/flexvol installed by helm (the lane's image, plugin and config directories,
    host network), upgraded to the v2 image (every container v2, the installed driver v2's),
    uninstalled (the DaemonSet, policy and ConfigMaps gone)."""
    chart = os.path.join(C.ROOT, "deploy", "helm", "flexvol")
    _lane_uninstalled(t)
    lane = ["--set", "image.repository=localhost/flexvol/installer", "--set", f"pluginDir={C.p('plugins')}",
            "--set", f"nodeConfigDir={C.p('etc')}", "--set", "hostNetwork=true"]
    try:
        _helm(t, "install", "flexvol", chart, "-n", "kube-system", *lane, "--set", "image.tag=kube-test",
              "--wait", "--timeout", "4m")
        t.rollout()
        ds = t.kj("-n", "kube-system", "get", "ds", "flexvol-installer")
        check(all(c["image"] == INSTALLER for c in ds["spec"]["template"]["spec"]["containers"]), "image after install")
        check(t.k("get", "validatingadmissionpolicy", "flexvol-volumes", check=False).returncode == 0,
              "no admission policy after helm install")
        _helm(t, "upgrade", "flexvol", chart, "-n", "kube-system", *lane, "--set", "image.tag=kube-test-v2",
              "--wait", "--timeout", "4m")
        t.rollout()
        ds = t.kj("-n", "kube-system", "get", "ds", "flexvol-installer")
        check(all(c["image"] == INSTALLER_V2 for c in ds["spec"]["template"]["spec"]["containers"]),
              "image after upgrade")
        with open(os.path.join(C.p("plugins"), "flexvol~loop", "loop"), "rb") as f:
            check(f.read().endswith(MARK), "the installed driver is not v2's after helm upgrade")
        check(_drivers_in(t, "gc").endswith(MARK), "gc does not hold the v2 drivers")
    finally:
        try:
            _helm(t, "uninstall", "flexvol", "-n", "kube-system", "--wait", "--timeout", "3m")
        finally:
            gone = {f"{k}/{n}": t.k("get", k, n, *(["-n", ns] if ns else []), check=False).returncode != 0
                    for k, n, ns in (("ds", "flexvol-installer", "kube-system"), ("cm", "flexvol-config", "kube-system"),
                                     ("cm", "flexvol-policy", "kube-system"),
                                     ("validatingadmissionpolicy", "flexvol-volumes", None))}
            _lane_reinstalled(t)
    check(all(gone.values()), f"left after helm uninstall: {[k for k, v in gone.items() if not v]}")


def case_release_artefacts(t):
    """A release installed from its artefacts alone (make release VERSION=<VERSION>
    RELEASE_IMAGE=localhost/flexvol/installer, in build/release/<VERSION>, or
    FLEXVOL_RELEASE_DIR): SHA256SUMS verified, the kubectl plugin run by kubectl from the lane's
    kubeconfig, the OCI image index archive imported into
    containerd, manifests/kubeadm+loop.yaml applied with the lane's patches: every container on
    the index digest, the installer logs the release's version, the node agent reports."""
    version = open(os.path.join(C.ROOT, "VERSION")).read().strip()
    rel = os.environ.get("FLEXVOL_RELEASE_DIR") or os.path.join(C.ROOT, "build", "release", version)
    check(os.path.isfile(os.path.join(rel, "SHA256SUMS")),
          f"no release in {rel} (make release VERSION={version} RELEASE_IMAGE=localhost/flexvol/installer)")
    r = subprocess.run(["sha256sum", "-c", "--quiet", "SHA256SUMS"], cwd=rel, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    check(r.returncode == 0, f"sha256sum -c SHA256SUMS: {r.stdout[-300:]}")
    # the kubectl plugin as released (static flexvol-migrate): put on PATH as kubectl-flexvol,
    # run by kubectl itself, the cluster from the lane's kubeconfig as kubectl reads it
    arch = {"x86_64": "amd64", "aarch64": "arm64"}[os.uname().machine]
    plug = tempfile.mkdtemp(prefix="fvplugin-")
    try:
        shutil.copy(os.path.join(rel, f"kubectl-flexvol-{version}-linux-{arch}"),
                    os.path.join(plug, "kubectl-flexvol"))
        r = subprocess.run([t.cl.b("kubectl"), "flexvol", "migrate", "--dry-run", "-l", "flexvol.test/none=none"],
                           env={"PATH": f"{plug}:/usr/bin:/bin", "HOME": plug, "KUBECONFIG": C.p("admin.kubeconfig")},
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
        check(r.returncode == 0 and "nothing to do" in r.stdout,
              f"kubectl flexvol migrate from the release: exit {r.returncode}: {r.stdout[-400:]}")
    finally:
        shutil.rmtree(plug, ignore_errors=True)
    archive = os.path.join(rel, f"flexvol-installer-{version}.oci.tar")
    t.cl.ctr("images", "import", "--base-name", "localhost/flexvol/installer", "--all-platforms", archive,
             timeout=300)
    # the release's manifests name the image by the index's digest, and the CRI finds an image by
    # its references only (without name@digest the kubelet tries to pull it): a registry would
    # answer that reference; here it is tagged (ctr's --digests names the archive's outer index)
    import tarfile
    with tarfile.open(archive) as tf:
        index = json.load(tf.extractfile("index.json"))["manifests"][0]["digest"]
    t.cl.ctr("images", "tag", "--force", f"localhost/flexvol/installer:{version}",
             f"localhost/flexvol/installer@{index}")
    _lane_uninstalled(t)
    os.makedirs(SITE, exist_ok=True)
    shutil.copy(os.path.join(rel, "manifests", "kubeadm+loop.yaml"), os.path.join(SITE, "release.yaml"))
    k = json.load(open(os.path.join(site(INSTALLER, components=("loop",)), "kustomization.yaml")))
    k["resources"] = ["release.yaml"]
    k.pop("components", None)
    k.pop("images", None)
    with open(os.path.join(SITE, "kustomization.yaml"), "w") as f:
        json.dump(k, f)
    try:
        t.k("apply", "-k", SITE, timeout=120)
        t.rollout()
        ds = t.kj("-n", "kube-system", "get", "ds", "flexvol-installer")
        imgs = {c["image"] for c in ds["spec"]["template"]["spec"]["containers"]}
        check(len(imgs) == 1 and "@sha256:" in imgs.pop(), f"DaemonSet images {imgs}")
        logs = t.k("-n", "kube-system", "logs", "ds/flexvol-installer", "-c", "install", check=False).stdout
        check(f"flexvol {version}:" in logs, f"installer log does not name {version}: {logs[-400:]}")
        C.wait_for("the node agent's report", lambda: t.k("-n", "flexvol-loop", "get", "cm", C.NODE,
                                                         check=False).returncode == 0, 90, 1)
    finally:
        t.k("delete", "-k", SITE, "--wait=true", "--ignore-not-found", check=False, timeout=180)
        shutil.rmtree(SITE, ignore_errors=True)
        _lane_reinstalled(t)


CASES = [case_release_policy_provisioned_pvs, case_release_site_upgrade, case_release_helm, case_release_artefacts]
