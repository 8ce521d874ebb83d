# SPDX-License-Identifier: Apache-2.0
"""Every kind of PersistentVolume flexvol-provisioner makes, made by the provisioner itself.

    python3 tests/policy/provisioned.py --build DIR > pvs.json

The real binary (DIR/flexvol-provisioner) runs against the fake API server of
tests/provisioner (fakeapi.py), once per backend, with one StorageClass per class
parameter the code knows (the lists are read from provisioner/params.c and
provisioner/backend-loop.c, so a new parameter without a value here fails) and a
claim of each; the PVs it creates are the output: {"<backend> <variant>": PV}.
tests/policy/run (make check-policy) evaluates the shipped admission policy on
them; the cluster lane (tests/kube/cases_release.py) sends them to the real API
server with the policy installed.
"""
import importlib.util
import json
import os
import re
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))

# a valid value of each class parameter (docs/provisioner.md, docs/loop-provisioning.md)
NFS_VALUES = {"pathPattern": "${namespace}-${pvc}", "onDelete": "delete", "mode": "0750", "uid": "1000",
              "gid": "1000", "nfsVersion": "4.1", "mountOptions": "hard,timeo=600", "readOnly": "true",
              "adoptExisting": "true", "allowUnscopedClaimValues": "true"}
NFS_BASE = {"server": "nfs.example.com", "share": "/exports/k8s"}
LOOP_VALUES = {"fsType": ["ext4", "xfs"], "csi.storage.k8s.io/fstype": ["xfs"], "preallocate": ["true", "false"],
               "overcommit": ["true", "false"]}


def nfs_params():
    """The class parameters provisioner/params.c knows (its known[] table)."""
    text = open(os.path.join(ROOT, "provisioner/params.c")).read()
    body = re.search(r"static const char \*const known\[\] = \{(.*?)\};", text, re.S).group(1)
    return re.findall(r'"([^"]+)"', body)


def loop_params():
    """The class parameters backend-loop.c's class parser compares keys with (macros resolved)."""
    text = "".join(open(os.path.join(ROOT, "provisioner", f)).read() for f in ("backend-loop.c", "loop.h"))
    macros = dict(re.findall(r'#define ([A-Z_]+)\s+"([^"]+)"', text))
    return sorted({macros.get(k, k) for k in re.findall(r'streq\(key, "?([^")]+)"?\)', text)})


def _prov():
    spec = importlib.util.spec_from_file_location("prov_run", os.path.join(ROOT, "tests/provisioner/run.py"))
    sys.path.insert(0, os.path.join(ROOT, "tests/provisioner"))
    m = importlib.util.module_from_spec(spec)
    sys.modules["prov_run"] = m  # run.py registers its loop cases through sys.modules
    spec.loader.exec_module(m)
    return m


def _wait(what, fn, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        v = fn()
        if v:
            return v
        time.sleep(0.1)
    raise RuntimeError("timed out waiting for " + what)


def make(build):
    """{name: PV} of every variant; raises on a missing value or a claim not provisioned."""
    R = _prov()
    out = {}
    missing = [k for k in nfs_params() if k not in NFS_BASE and k not in NFS_VALUES] + \
        [k for k in loop_params() if k not in LOOP_VALUES]
    if missing:
        raise RuntimeError(f"no sample value for class parameter(s) {missing} (tests/policy/provisioned.py)")
    e = R.Env(build)
    try:
        e.start("--provisioners", "flexvol/nfs")
        variants = [("defaults", {})] + [(f"{k}={v}", {k: v}) for k, v in NFS_VALUES.items()]
        claims = []
        for i, (name, extra) in enumerate(variants):
            e.sc(f"nfs{i}", params=dict(NFS_BASE, **extra))
            claims.append((name, e.pvc(f"c{i}", sc=f"nfs{i}", labels={"app": "x"})))
        for name, c in claims:
            out[f"flexvol/nfs {name}"] = _wait(f"a PV for nfs {name}", lambda c=c: e.pv_of(c))
    finally:
        e.close()
    e = R.Env(build)
    try:
        node = "node-a"
        e.st.put("nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": node, "labels": {"kubernetes.io/hostname": node, "kubernetes.io/os": "linux"}}})
        e.st.put("configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": node, "namespace": "flexvol-loop"},
                                "data": {"free": str(1 << 40), "time": str(int(time.time())), "root": "/x"}})
        e.start("--provisioners", "flexvol/loop")
        variants = [("defaults", {})] + [(f"{k}={v}", {k: v}) for k, vs in LOOP_VALUES.items() for v in vs]
        claims = []
        for i, (name, params) in enumerate(variants):
            e.st.put("storageclasses", {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                                        "metadata": {"name": f"loop{i}"}, "provisioner": "flexvol/loop",
                                        "parameters": params, "volumeBindingMode": "WaitForFirstConsumer"})
            claims.append((name, e.pvc(f"l{i}", sc=f"loop{i}", size="64Mi", modes=("ReadWriteOnce",),
                                       provisioner="flexvol/loop",
                                       annotations={"volume.kubernetes.io/selected-node": node})))
        for name, c in claims:
            out[f"flexvol/loop {name}"] = _wait(f"a PV for loop {name}", lambda c=c: e.pv_of(c))
    finally:
        e.close()
    for pv in out.values():  # what the API server adds or the store keeps is not ours
        pv.pop("status", None)
        for k in ("uid", "resourceVersion", "creationTimestamp", "managedFields"):
            pv.get("metadata", {}).pop(k, None)
    return out


if __name__ == "__main__":
    build = sys.argv[sys.argv.index("--build") + 1] if "--build" in sys.argv else os.path.join(ROOT, "build")
    json.dump(make(os.path.abspath(build)), sys.stdout, indent=1, sort_keys=True)
