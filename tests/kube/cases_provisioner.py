# SPDX-License-Identifier: Apache-2.0
"""Cluster-lane cases: flexvol-provisioner deployed from deploy/provisioner/ through the real
API server, controller-manager (PV binder) and kubelet.

The manifests are applied as they are, with four changes this single-node, registry-less,
NFS-less cluster needs (nothing else): the image is the locally imported installer image (it
carries the static provisioner) with imagePullPolicy: Never; the share volume is a hostPath
(this host kernel has no NFS client, so the API flow is what runs here: claims, PVs, the
directories on the share root); the pod uses the host network and KUBERNETES_SERVICE_HOST/PORT
point at the API server on 127.0.0.1 (there is no kube-proxy for the service's ClusterIP).
"""
import json
import os
import time

import cluster as C
from run import CaseFailed, INSTALLER, NS, check

SHARE = C.p("share")
PROV_DIR = os.path.join(C.ROOT, "deploy", "provisioner")
LABEL = "app.kubernetes.io/name=flexvol-provisioner"


def _objs(t, path):
    return t.objs(path)


# the lane's host-network port of each provisioner Deployment (see deploy())
HOST_PORTS = {"flexvol-provisioner": 8080, "flexvol-loop-provisioner": 8081}


def deploy(t, replicas=1, files=None):
    """Apply rbac.yaml and deployment.yaml (or @files: deploy/loop's provisioner.yaml) with the
    lane's four changes; wait until Available."""
    files = files or [os.path.join(PROV_DIR, "rbac.yaml"), os.path.join(PROV_DIR, "deployment.yaml")]
    objs = [o for f in files for o in _objs(t, f)]
    name = [o["metadata"]["name"] for o in objs if o["kind"] == "Deployment"][0]
    for o in objs:
        if o["kind"] == "Deployment":
            o["spec"]["replicas"] = replicas
            spec = o["spec"]["template"]["spec"]
            ct = spec["containers"][0]
            ct["image"] = INSTALLER
            ct["imagePullPolicy"] = "Never"
            ct.setdefault("env", []).extend([{"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
                                             {"name": "KUBERNETES_SERVICE_PORT", "value": "6443"}])
            spec["hostNetwork"] = True
            # on the host network two Deployments on one node cannot both take the manifests'
            # port 8080 (the scheduler keeps the second Pending: no free ports): deploy/loop's
            # provisioner serves on HOST_PORTS' port of its own (probes follow the named port)
            port = HOST_PORTS.get(name, 8080)
            ct["args"] = [a if a != "--http-endpoint=:8080" else f"--http-endpoint=:{port}"
                          for a in ct["args"]]
            for cp in ct.get("ports") or []:
                if cp.get("containerPort") == 8080:
                    cp["containerPort"] = port
            if replicas > 1:
                # on the host network the replicas of one node share one port (and the scheduler
                # places no two pods declaring the same port on a node): each takes a port of its
                # own (0: the kernel's pick) and goes without the declared port and the probes
                ct.pop("ports", None)
                ct["args"] = [a if not a.startswith("--http-endpoint=") else "--http-endpoint=127.0.0.1:0"
                              for a in ct["args"]]
                ct.pop("livenessProbe", None)
                ct.pop("readinessProbe", None)
            for v in spec.get("volumes") or []:
                if v["name"] == "share":
                    v.pop("nfs", None)
                    v["hostPath"] = {"path": SHARE, "type": "DirectoryOrCreate"}
    t.k("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
    r = t.k("-n", "kube-system", "rollout", "status", f"deploy/{name}", "--timeout=120s",
            check=False, timeout=150)
    if r.returncode != 0:
        pods = t.k("-n", "kube-system", "get", "pods", "-l", LABEL, "-o", "wide", check=False).stdout
        raise CaseFailed(f"provisioner rollout: {r.stderr.strip()} {pods}")


def classes(t):
    """The StorageClass of deploy/provisioner/storageclass.yaml, and a copy per onDelete."""
    objs = [o for o in _objs(t, os.path.join(PROV_DIR, "storageclass.yaml")) if o["kind"] == "StorageClass"]
    sc = objs[0]
    out = {}
    for od in ("archive", "delete", "retain"):
        o = json.loads(json.dumps(sc))
        o["metadata"]["name"] = f"{sc['metadata']['name']}-{od}"
        o["parameters"]["onDelete"] = od
        t.apply(o)
        out[od] = o["metadata"]["name"]
    return out


def claim(t, name, sc):
    t.apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": NS},
             "spec": {"storageClassName": sc, "accessModes": ["ReadWriteMany"],
                      "resources": {"requests": {"storage": "1Gi"}}}})


def wait_bound(t, names, timeout=120):
    def ok():
        items = t.kj("get", "pvc", "-n", NS)["items"]
        ph = {i["metadata"]["name"]: i["status"].get("phase") for i in items}
        return all(ph.get(n) == "Bound" for n in names)
    try:
        C.wait_for(f"claims {names} Bound", ok, timeout, 1)
    except TimeoutError as e:
        logs = t.k("-n", "kube-system", "logs", "-l", LABEL, "--tail=20", check=False).stdout
        raise CaseFailed(f"{e}; provisioner log: {logs[-2000:]}")


def pvs_of(t, names):
    """Every PV (bound or released) whose claimRef names one of the claims: claim -> [PV]."""
    out = {n: [] for n in names}
    for pv in t.kj("get", "pv")["items"]:
        ref = pv["spec"].get("claimRef") or {}
        if ref.get("namespace") == NS and ref.get("name") in out:
            out[ref["name"]].append(pv)
    return out


def dirs():
    return sorted(d for d in os.listdir(SHARE)) if os.path.isdir(SHARE) else []


def _one_pv_one_dir(t, names):
    pvs = pvs_of(t, names)
    dup = {n: [p["metadata"]["name"] for p in v] for n, v in pvs.items() if len(v) != 1}
    check(not dup, f"claims without exactly one PV: {dup}")
    for n, (pv,) in pvs.items():
        fv = pv["spec"].get("flexVolume") or {}
        check(fv.get("driver") == "flexvol/nfs", f"PV {pv['metadata']['name']} driver {fv.get('driver')}")
    mine = [d for d in dirs() if not d.startswith("archived-") and any(f"-{n}-" in d for n in names)]
    check(len(mine) == len(names), f"{len(names)} claims but these directories: {mine}")
    return pvs


def claims(t, names, sc):
    """All claims in one request (the provisioner sees them at once)."""
    t.k("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": n, "namespace": NS},
         "spec": {"storageClassName": sc, "accessModes": ["ReadWriteMany"],
                  "resources": {"requests": {"storage": "1Gi"}}}} for n in names]}))


def _provisioned_once(t, names):
    """Evidence a duplicate leaves even after its PV is reclaimed: a second ProvisioningSucceeded
    event for the claim, a second (or archived) directory named after it."""
    counts = {n: 0 for n in names}
    for e in t.kj("get", "events", "-n", NS, "--field-selector", "reason=ProvisioningSucceeded")["items"]:
        n = e["involvedObject"].get("name")
        if n in counts:
            counts[n] += e.get("count") or 1
    bad = {n: c for n, c in counts.items() if c != 1}
    check(not bad, f"ProvisioningSucceeded events per claim (want 1 each): {bad}")
    per = {n: [d for d in dirs() if f"-{n}-" in d] for n in names}
    bad = {n: d for n, d in per.items() if len(d) != 1}
    check(not bad, f"directories per claim (archived ones included, want 1 each): {bad}")


def case_provisioner_bind(t):
    """Claims of the class in deploy/provisioner are provisioned by flexvol-provisioner and bound
    by the controller-manager's binder; one PV (flexvol/nfs) and one directory per claim."""
    deploy(t)
    t.sc = classes(t)
    names = [f"pb-{od}" for od in t.sc]
    for od, sc in t.sc.items():
        claim(t, f"pb-{od}", sc)
    wait_bound(t, names)
    _one_pv_one_dir(t, names)
    ev = t.k("get", "events", "-n", NS, "--field-selector", "involvedObject.name=pb-archive",
             "-o", "jsonpath={.items[*].reason}").stdout
    check("ProvisioningSucceeded" in ev, f"no ProvisioningSucceeded event: {ev}")


def case_provisioner_ondelete(t):
    """Deleting each claim: the PV goes (reclaimPolicy Delete) and the directory is archived,
    deleted or kept as the class's onDelete says."""
    if not getattr(t, "sc", None):
        case_provisioner_bind(t)
    names = [f"pb-{od}" for od in t.sc]
    pvs = pvs_of(t, names)
    dirname = {}
    for n, (pv,) in pvs.items():
        path = (pv["spec"]["flexVolume"].get("options") or {}).get("path") or ""
        match = [d for d in dirs() if f"-{n}-" in d and not d.startswith("archived-")]
        check(len(match) == 1, f"directory of {n}: {match} (PV path {path})")
        dirname[n] = match[0]
    with open(os.path.join(SHARE, dirname["pb-archive"], "data"), "w") as f:
        f.write("keep me\n")
    for n in names:
        t.delete("pvc", n)
    C.wait_for("the three PVs deleted", lambda: not any(pvs_of(t, names).values()), 120, 1)

    def settled():
        d = dirs()
        return (dirname["pb-archive"] not in d and dirname["pb-delete"] not in d and
                dirname["pb-retain"] in d and any(x.startswith("archived-") and dirname["pb-archive"] in x for x in d))
    try:
        C.wait_for("onDelete applied to the directories", settled, 60, 1)
    except TimeoutError as e:
        raise CaseFailed(f"{e}: share root now holds {dirs()}; expected {dirname['pb-archive']} archived, "
                         f"{dirname['pb-delete']} deleted, {dirname['pb-retain']} kept")
    arch = [x for x in dirs() if x.startswith("archived-") and dirname["pb-archive"] in x][0]
    with open(os.path.join(SHARE, arch, "data")) as f:
        check(f.read() == "keep me\n", "archived directory lost its data")


def case_provisioner_restart(t):
    """Five claims, the provisioner pod deleted right after they are created: its replacement
    finishes the work; never two PVs or two directories for one claim."""
    deploy(t)
    sc = getattr(t, "sc", None) or classes(t)
    t.sc = sc
    names = [f"pr-{i}" for i in range(5)]
    # the archive class: a duplicate's directory would stay (archived) as evidence
    claims(t, names, sc["archive"])
    t.k("-n", "kube-system", "delete", "pod", "-l", LABEL, "--wait=false", "--grace-period=1")
    wait_bound(t, names, 180)
    time.sleep(5)  # a duplicate would show up (and be released) within this
    try:
        _one_pv_one_dir(t, names)
        _provisioned_once(t, names)
    finally:
        for n in names:
            t.delete("pvc", n, wait=False)
        C.wait_for("restart claims' PVs gone", lambda: not any(pvs_of(t, names).values()), 120, 1)


def case_provisioner_two_replicas(t):
    """Two replicas of the Deployment at once: still one PV and one directory per claim."""
    deploy(t, replicas=2)
    sc = getattr(t, "sc", None) or classes(t)
    t.sc = sc
    names = [f"p2-{i}" for i in range(5)]
    claims(t, names, sc["archive"])
    wait_bound(t, names, 180)
    time.sleep(5)
    try:
        _one_pv_one_dir(t, names)
        _provisioned_once(t, names)
    finally:
        for n in names:
            t.delete("pvc", n, wait=False)
        C.wait_for("two-replica claims' PVs gone", lambda: not any(pvs_of(t, names).values()), 120, 1)
        t.k("-n", "kube-system", "delete", "deploy", "flexvol-provisioner", "--wait=true", check=False)


CASES = [case_provisioner_bind, case_provisioner_ondelete, case_provisioner_restart,
         case_provisioner_two_replicas]
