#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""tests/vm/t-nfs-provisioner's body (inside the VM): BUILD SCRATCH SERVER EXPORT."""
import json
import os
import subprocess
import sys
import time
import uuid

build, scratch, server, export = sys.argv[1:5]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "provisioner"))
from fakeapi import FakeAPI  # noqa: E402


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    raise SystemExit(1)


def wait_for(fn, what, timeout=60):
    t0 = time.time()
    while time.time() - t0 < timeout:
        v = fn()
        if v:
            return v
        time.sleep(0.1)
    fail("timed out waiting for " + what)


def driver(*args):
    env = dict(os.environ, FLEXVOL_CONFIG=scratch + "/prov-flexvol.conf",
               FLEXVOL_STATE_DIR=scratch + "/prov-state", FLEXVOL_RUN_DIR=scratch + "/prov-run",
               FLEXVOL_LOG_FILE=scratch + "/prov-nfs.log")
    open(env["FLEXVOL_CONFIG"], "a").close()
    p = subprocess.run([build + "/nfs"] + list(args), capture_output=True, text=True, env=env)
    if p.stderr:
        fail("driver wrote to stderr: " + p.stderr)
    return json.loads(p.stdout)


root = scratch + "/provisioner-root"
os.makedirs(root, exist_ok=True)
subprocess.run(["mount", "-t", "nfs", "-o", "vers=4.2", "%s:%s" % (server, export), root], check=True)
api = FakeAPI()
st = api.store
prov = None
try:
    st.put("storageclasses", {
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "nfs"},
        "provisioner": "flexvol/nfs",
        "parameters": {"server": server, "share": export, "nfsVersion": "4.2", "mode": "0770",
                       "uid": "1001", "gid": "1002", "mountOptions": "hard,timeo=600",
                       "pathPattern": "${namespace}/${pvc}-${pv}"}})
    prov = subprocess.Popen([build + "/flexvol-provisioner", "--server", api.url, "--root", root,
                             "--share", "%s:%s" % (server, export), "--resync", "10",
                             "--http-endpoint", "127.0.0.1:0", "--retry-base", "1", "--retry-max", "5"],
                            stderr=open(scratch + "/provisioner.log", "w"))
    uid = str(uuid.uuid4())
    st.put("persistentvolumeclaims", {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": "e2e", "uid": uid,
                     "annotations": {"volume.kubernetes.io/storage-provisioner": "flexvol/nfs"}},
        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "nfs",
                 "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": "Pending"}})
    pvname = "pvc-" + uid
    pv = wait_for(lambda: (st.get("persistentvolumes", pvname) or {}).get("status", {}).get("phase") == "Bound"
                  and st.get("persistentvolumes", pvname), "PV bound")
    fx = pv["spec"]["flexVolume"]
    sub = fx["options"]["subPath"]
    if sub != "e2e/data-" + pvname:
        fail("subPath " + sub)
    s = os.stat(os.path.join(export, sub))  # the server's side of the share
    if (s.st_mode & 0o7777, s.st_uid, s.st_gid) != (0o770, 1001, 1002):
        fail("directory on the server: mode %o uid %d gid %d" % (s.st_mode, s.st_uid, s.st_gid))
    if not [n for n in os.listdir(os.path.join(export, "e2e")) if n.startswith(".flexvol-owner-")]:
        fail("no owner record next to the directory on the server: %s" % os.listdir(os.path.join(export, "e2e")))
    print("provisioned %s: %s (0770 1001:1002 on the server, owner record beside it)" % (pvname, sub))

    # kubelet: the PV's options plus its own keys, to the driver's mount
    opts = dict(fx["options"])
    opts.update({"kubernetes.io/fsType": "", "kubernetes.io/pvOrVolumeName": pvname,
                 "kubernetes.io/readwrite": "ro" if fx.get("readOnly") else "rw",
                 "kubernetes.io/pod.uid": "pod-1"})
    pod = scratch + "/kubelet/pods/pod-1/volumes/flexvol~nfs/" + pvname
    os.makedirs(pod, exist_ok=True)
    r = driver("mount", pod, json.dumps(opts, sort_keys=True, separators=(",", ":")))
    if r.get("status") != "Success":
        fail("mount: %s" % r)
    src = [l.split() for l in open("/proc/self/mountinfo") if l.split()[4] == pod]
    if not src:
        fail("nothing mounted at the pod dir")
    with open(pod + "/written-by-pod", "w") as f:
        f.write("hello")
    os.sync()
    if open(os.path.join(export, sub, "written-by-pod")).read() != "hello":
        fail("the pod's write is not in the claim's directory on the server")
    print("pod mount through the nfs driver: %s" % " ".join(src[0][src[0].index("-") + 1:][:2]))
    r = driver("unmount", pod)
    if r.get("status") != "Success":
        fail("unmount: %s" % r)

    st.api_delete("persistentvolumeclaims", "e2e", "data")
    wait_for(lambda: st.get("persistentvolumes", pvname) is None, "PV deleted")
    arch = os.path.join(export, "e2e", "archived-data-" + pvname)
    if open(os.path.join(arch, "written-by-pod")).read() != "hello" or os.path.exists(os.path.join(export, sub)):
        fail("not archived: %s" % os.listdir(os.path.join(export, "e2e")))
    print("claim deleted: archived as %s, PV deleted" % os.path.relpath(arch, export))

    # onDelete=delete on NFS: a tree with files of other owners, a symlink out of it
    st.put("storageclasses", {
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "nfs-del"},
        "provisioner": "flexvol/nfs", "parameters": {"server": server, "share": export,
                                                     "onDelete": "delete"}})
    uid2 = str(uuid.uuid4())
    st.put("persistentvolumeclaims", {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "tmp", "namespace": "e2e", "uid": uid2, "annotations": {}},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "nfs-del",
                 "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": "Pending"}})
    pv2 = "pvc-" + uid2
    wait_for(lambda: st.get("persistentvolumes", pv2), "second PV")
    d2 = os.path.join(root, st.get("persistentvolumes", pv2)["spec"]["flexVolume"]["options"]["subPath"])
    os.makedirs(d2 + "/a/b")
    for i, owner in enumerate((0, 1001, 65534)):
        with open("%s/a/b/f%d" % (d2, i), "w") as f:
            f.write("x" * 1000)
        os.chown("%s/a/b/f%d" % (d2, i), owner, owner)
    os.chmod(d2 + "/a/b", 0o700)
    os.chown(d2 + "/a/b", 1001, 1001)
    os.symlink(export, d2 + "/a/out")
    st.api_delete("persistentvolumeclaims", "e2e", "tmp")
    wait_for(lambda: st.get("persistentvolumes", pv2) is None, "second PV deleted")
    if os.path.exists(os.path.join(export, os.path.relpath(d2, root))) or not os.path.isdir(arch):
        fail("onDelete=delete on NFS: %s" % os.listdir(export))
    print("onDelete=delete on NFS: tree of three owners removed, nothing else touched")
finally:
    if prov:
        prov.terminate()
        prov.wait(10)
    api.close()
    subprocess.run(["umount", root])
    print(open(scratch + "/provisioner.log").read())
