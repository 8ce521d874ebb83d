# SPDX-License-Identifier: Apache-2.0
"""The CSI PersistentVolumes flexvol makes, made by the real programs.

    python3 tests/policy/csi_made.py --build DIR > pvs.json

provisioned(build): every PV a claim of flexvol's CSI classes gets. The real flexvol-csi of
DIR (--driver loop, --driver nfs, and loop renamed with --driver-name) answers CreateVolume,
called as external-provisioner calls it for the shipped classes (deploy/csi/controller/
storageclass.yaml, deploy/csi/nfs/storageclass.yaml; and loop's own parameter, preallocate,
each value, read from csi/controller-loop.c), and the PV is built from the answer as
external-provisioner builds it (kubernetes-csi/external-provisioner, pkg/controller/
controller.go, v6.3.0 and later): volumeHandle the volume ID, volumeAttributes the answer's
volume context over {"storage.kubernetes.io/csiProvisionerIdentity": <identity>}, fsType the
class's csi.storage.k8s.io/fstype, nodeAffinity from the accessible topology. The sidecar
itself does not run here (it needs an API server and a claim); what it adds is those lines.

migrated(build, pvs): each FlexVolume PV of @pvs moved to CSI by the real
`flexvol-provisioner migrate` against the fake API server of tests/provisioner (fakeapi.py,
with pods and VolumeAttachments added, none of them using the volume): the PV it creates.
A PV without a claim gets one first (migrate moves bound PVs only).

tests/policy/run (make check-policy) evaluates the policy on both; the cluster lane's
release_policy_provisioned_pvs sends them to the real API server.
"""
import concurrent.futures
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))
NODE = "node-a"
SHARE = "nfs.example.com:/exports/k8s"
# external-provisioner's identity: "<start time ms>-<random>-<driver name>", "-<node>" added
# with --node-deployment (cmd/csi-provisioner/csi-provisioner.go)
IDENTITY_KEY = "storage.kubernetes.io/csiProvisionerIdentity"


def _yaml(path):
    import yaml
    with open(os.path.join(ROOT, path)) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def csi_call_bin():
    """tests/csi's client (built, or reused from its cache, by tests/csi/build)."""
    p = subprocess.run([os.path.join(ROOT, "tests/csi/build")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    if p.returncode != 0:
        raise RuntimeError("tests/csi/build: " + p.stderr[-500:])
    return os.path.join(os.path.dirname(p.stdout.strip().splitlines()[-1]), "csi-call")


def loop_params():
    """The class parameters csi/controller-loop.c's CreateVolume takes (besides the sidecars')."""
    text = open(os.path.join(ROOT, "csi/controller-loop.c")).read()
    return sorted(set(re.findall(r'streq\(k, "([^"]+)"\)', text)))


LOOP_VALUES = {"preallocate": ["true", "false"], "overcommit": ["1", "2.5", "100"]}


class Endpoint:
    """flexvol-csi --driver DRIVER on a socket and directories of its own."""

    def __init__(self, build, call, driver, name=None):
        self.call_bin = call
        self.dir = tempfile.mkdtemp(prefix="fvpolicy-csi.")
        self.sock = os.path.join(self.dir, "csi.sock")
        root = os.path.join(self.dir, "root")
        for d in ("root", "state", "run"):
            os.mkdir(os.path.join(self.dir, d))
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "FLEXVOL_CONFIG": "/dev/null",
               "FLEXVOL_LOOP_ROOT": root, "FLEXVOL_STATE_DIR": os.path.join(self.dir, "state"),
               "FLEXVOL_RUN_DIR": os.path.join(self.dir, "run"),
               "FLEXVOL_LOG_FILE": os.path.join(self.dir, "driver.log"), "FLEXVOL_NODE_NAME": NODE}
        self.log = open(os.path.join(self.dir, "endpoint.log"), "w")
        self.proc = subprocess.Popen([os.path.join(build, "flexvol-csi"), "--endpoint", "unix://" + self.sock,
                                      "--driver", driver, *(["--driver-name", name] if name else []),
                                      *(["--root", root, "--share", SHARE] if driver == "nfs" else [])],
                                     env=env, stdout=self.log, stderr=self.log)
        end = time.monotonic() + 10
        while not os.path.exists(self.sock):
            if time.monotonic() > end or self.proc.poll() is not None:
                self.close()
                raise RuntimeError(f"flexvol-csi --driver {driver} did not start: " + self.logs())
            time.sleep(0.05)

    def logs(self):
        with open(os.path.join(self.dir, "endpoint.log")) as f:
            return f.read()[-1000:]

    def call(self, method, req):
        svc = "Identity" if method == "GetPluginInfo" else "Controller"
        r = subprocess.run([self.call_bin, "-endpoint", "unix://" + self.sock, f"/csi.v1.{svc}/{method}",
                            json.dumps(req)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"{method} {json.dumps(req)}: {r.stderr.strip()}")
        return json.loads(r.stdout)

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _quantity(n):
    """bytesToQuantity: a binary-SI quantity ("64Mi")."""
    for unit, shift in (("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)):
        if n and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def _pv(driver, cls, claim, size, modes, fstype, vol, identity):
    """The PV external-provisioner writes for CreateVolume's answer @vol (controller.go)."""
    pv = {"apiVersion": "v1", "kind": "PersistentVolume",
          "metadata": {"name": "pvc-" + claim["uid"],
                       "annotations": {"pv.kubernetes.io/provisioned-by": driver,
                                       "volume.kubernetes.io/provisioner-deletion-secret-name": "",
                                       "volume.kubernetes.io/provisioner-deletion-secret-namespace": ""},
                       "finalizers": ["external-provisioner.volume.kubernetes.io/finalizer"]},
          "spec": {"accessModes": modes,
                   "capacity": {"storage": _quantity(int(vol.get("capacityBytes") or size))},
                   "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "name": claim["name"],
                                "namespace": claim["namespace"], "uid": claim["uid"]},
                   "csi": {"driver": driver, "volumeHandle": vol["volumeId"],
                           "volumeAttributes": dict({IDENTITY_KEY: identity}, **(vol.get("volumeContext") or {}))},
                   "persistentVolumeReclaimPolicy": cls.get("reclaimPolicy", "Delete"),
                   "storageClassName": cls["metadata"]["name"], "volumeMode": "Filesystem"}}
    if fstype:
        pv["spec"]["csi"]["fsType"] = fstype
    if cls.get("mountOptions"):
        pv["spec"]["mountOptions"] = cls["mountOptions"]
    topo = vol.get("accessibleTopology") or []
    if topo:  # GenerateVolumeNodeAffinity: one term per topology, one expression per segment
        pv["spec"]["nodeAffinity"] = {"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": k, "operator": "In", "values": [v]}
                                  for k, v in sorted(t["segments"].items())]} for t in topo]}}
    return pv


def _provision(e, cls, variant, extra, modes, node):
    """One claim of class @cls (parameters plus @extra) through endpoint @e: its PV."""
    params = dict(cls.get("parameters") or {}, **extra)
    fstype = params.get("csi.storage.k8s.io/fstype", "")
    driver = e.call("GetPluginInfo", {})["name"]
    claim = {"name": "claim-" + variant, "namespace": "default", "uid": str(uuid.uuid4())}
    pv_name = "pvc-" + claim["uid"]
    # removePrefixedParameters, then --extra-create-metadata (deploy/csi/controller)
    req_params = {k: v for k, v in params.items() if not k.startswith("csi.storage.k8s.io/")}
    req_params.update({"csi.storage.k8s.io/pvc/name": claim["name"],
                       "csi.storage.k8s.io/pvc/namespace": claim["namespace"],
                       "csi.storage.k8s.io/pv/name": pv_name})
    access = {"ReadWriteOnce": "SINGLE_NODE_WRITER", "ReadWriteMany": "MULTI_NODE_MULTI_WRITER"}
    req = {"name": pv_name, "parameters": req_params, "capacityRange": {"requiredBytes": str(64 << 20)},
           "volumeCapabilities": [{"mount": {"fsType": fstype}, "accessMode": {"mode": access[m]}}
                                  for m in modes]}
    if node:
        seg = {"segments": {f"topology.{driver}/node": NODE}}
        req["accessibilityRequirements"] = {"requisite": [seg], "preferred": [seg]}
    vol = e.call("CreateVolume", req)["volume"]
    identity = f"{int(time.time() * 1000)}-{1234}-{driver}" + (f"-{NODE}" if node else "")
    return _pv(driver, cls, claim, 64 << 20, modes, fstype, vol, identity)


def provisioned(build):
    """{name: PV} of every variant of flexvol's CSI classes; raises when a call fails."""
    call = csi_call_bin()
    loop_cls = _yaml("deploy/csi/controller/storageclass.yaml")[0]
    nfs_cls = _yaml("deploy/csi/nfs/storageclass.yaml")[0]
    missing = [k for k in loop_params() if k not in LOOP_VALUES]
    if missing:
        raise RuntimeError(f"no sample value for loop parameter(s) {missing} (tests/policy/csi_made.py)")
    out = {}
    for driver, name, cls, variants, modes, node in (
            ("loop", None, loop_cls, [("class", {})] + [(f"{k}={v}", {k: v}) for k, vs in LOOP_VALUES.items()
                                                         for v in vs], ["ReadWriteOnce"], True),
            ("loop", "loop.csi.example.com", loop_cls, [("class", {})], ["ReadWriteOnce"], True),
            ("nfs", None, nfs_cls, [("class", {})], ["ReadWriteMany"], False)):
        e = Endpoint(build, call, driver, name)
        try:
            for variant, extra in variants:
                pv = _provision(e, cls, f"{driver}-{len(out)}", extra, modes, node)
                out[f"{pv['spec']['csi']['driver']} {variant}"] = pv
        finally:
            e.close()
    return out


def _fakeapi():
    sys.path.insert(0, os.path.join(ROOT, "tests/provisioner"))
    import fakeapi
    # what migrate reads besides PVs and claims (its check that nothing uses the volume)
    fakeapi.KINDS.setdefault("pods", ("Pod", True))
    fakeapi.KINDS.setdefault("volumeattachments", ("VolumeAttachment", False))
    return fakeapi


def migrated(build, pvs, csi_driver=None):
    """{name: the CSI PV migrate made of @pvs[name]} for each FlexVolume PV of a flexvol driver;
    raises when migrate fails on one."""
    fakeapi = _fakeapi()
    api = fakeapi.FakeAPI()
    st = api.store
    tmp = tempfile.mkdtemp(prefix="fvpolicy-migrate.")
    made = {}
    put = st.put

    def put_binding(res, obj, typ=None):
        """The store's put, keeping each CSI PV as migrate creates it; and the PV binder's part
        where the fake lacks it (a claim bound again to a new PV of its volumeName)."""
        name = obj.get("metadata", {}).get("name")
        new = res == "persistentvolumes" and "csi" in obj.get("spec", {}) and name not in made
        if new:
            made[name] = json.loads(json.dumps(obj))
        out = put(res, obj, typ)
        if new and (obj.get("status") or {}).get("phase") != "Bound":
            ref = obj["spec"].get("claimRef") or {}
            claim = st.objs["persistentvolumeclaims"].get((ref.get("namespace"), ref.get("name")))
            obj["status"] = {"phase": "Bound"}
            put(res, obj)
            if claim is not None and claim["metadata"]["uid"] == ref.get("uid"):
                claim["status"] = dict(claim.get("status") or {}, phase="Bound")
                put("persistentvolumeclaims", claim)
        return out

    st.put = put_binding

    def one(key, pv):
        pv = json.loads(json.dumps(pv))
        name = pv["metadata"]["name"]
        for k in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp"):
            pv["metadata"].pop(k, None)
        pv["metadata"]["finalizers"] = ["kubernetes.io/pv-protection"]
        ref = pv["spec"].get("claimRef") or {"name": name, "namespace": "default"}
        claim_uid = ref.get("uid") or str(uuid.uuid4())
        pv["spec"]["claimRef"] = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "name": ref["name"],
                                  "namespace": ref.get("namespace") or "default", "uid": claim_uid}
        pv["status"] = {"phase": "Bound"}
        st.put("persistentvolumeclaims", {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": ref["name"], "namespace": pv["spec"]["claimRef"]["namespace"], "uid": claim_uid},
            "spec": {"accessModes": pv["spec"].get("accessModes", []), "volumeName": name,
                     "storageClassName": pv["spec"].get("storageClassName", ""),
                     "resources": {"requests": {"storage": pv["spec"]["capacity"]["storage"]}}},
            "status": {"phase": "Bound"}})
        st.put("persistentvolumes", pv)
        r = subprocess.run([os.path.join(build, "flexvol-provisioner"), "migrate", "--server", api.url,
                            "--save", os.path.join(tmp, name + ".json"), "--timeout", "60",
                            *(["--csi-driver", csi_driver] if csi_driver else []), name],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        if r.returncode != 0 or name not in made:
            raise RuntimeError(f"migrate {key} ({name}): exit {r.returncode}: {r.stdout.strip()[-500:]}")
        return key, made[name]

    try:
        todo = {k: pv for k, pv in pvs.items()
                if (pv.get("spec", {}).get("flexVolume") or {}).get("driver") in
                ("flexvol/loop", "flexvol/nfs", "flexvol/iscsi")}
        names = [pv["metadata"]["name"] for pv in todo.values()]
        if len(set(names)) != len(names):
            raise RuntimeError("two PVs of one name")
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            out = dict(pool.map(lambda kv: one(*kv), todo.items()))
    finally:
        api.close()
        shutil.rmtree(tmp, ignore_errors=True)
    for pv in out.values():  # what the API server adds or the store keeps is not ours
        pv.pop("status", None)
        for k in ("uid", "resourceVersion", "creationTimestamp", "managedFields"):
            pv.get("metadata", {}).pop(k, None)
    return out


if __name__ == "__main__":
    build = sys.argv[sys.argv.index("--build") + 1] if "--build" in sys.argv else os.path.join(ROOT, "build")
    build = os.path.abspath(build)
    pvs = provisioned(build)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import provisioned as flex
    pvs.update({"migrated " + k: v for k, v in migrated(build, flex.make(build)).items()})
    json.dump(pvs, sys.stdout, indent=1, sort_keys=True)
