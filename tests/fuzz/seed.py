#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Seed tests/fuzz/corpus/ with objects as the provisioner meets them.

    python3 tests/fuzz/seed.py --build build

Runs the fake API server of tests/provisioner with the real provisioner
(flexvol/nfs and flexvol/loop) and the real node agent, provisions an nfs
and a loop claim, grows and deletes one, then writes every object the API
then holds (classes, claims, PVs, nodes, the agent's space report) into the
corpus of its kind, and the watch stream of the claims and PVs (events as
the fake API frames them) into the watch corpus.  The objects the
provisioner and the agent wrote are theirs; the others are the test cases'.
"""

import argparse
import hashlib
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "provisioner"))
import run as R  # noqa: E402

KIND = {"storageclasses": "class", "persistentvolumeclaims": "claim", "persistentvolumes": "pv",
        "nodes": "node", "configmaps": "report"}


def write(kind, data):
    d = os.path.join(HERE, "corpus", kind)
    os.makedirs(d, exist_ok=True)
    name = hashlib.sha1(data).hexdigest()[:16]
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    a = ap.parse_args()
    e = R.Env(os.path.abspath(a.build))
    try:
        e.sc(params={"server": "nfs.example.com", "share": "/export/k8s", "nfsVersion": "4.1"})
        e.st.put("nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": "node-a", "labels": {"kubernetes.io/hostname": "node-a",
                                         "kubernetes.io/os": "linux"}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
        e.st.put("storageclasses", {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                                    "metadata": {"name": "loop"}, "provisioner": "flexvol/loop",
                                    "volumeBindingMode": "WaitForFirstConsumer",
                                    "allowVolumeExpansion": True,
                                    "parameters": {"fsType": "xfs"}})
        root = os.path.join(e.tmp, "loop-node-a")
        os.makedirs(root)
        e.start("--node-agent", "--node", "node-a", "--loop-root", root, "--interval", "1")
        R.wait_for(lambda: e.st.get("configmaps", "node-a", "flexvol-loop"), "report")
        e.start("--provisioners", "flexvol/nfs,flexvol/loop")
        c = e.pvc("data", ns="team-a", size="5Gi", labels={"app": "web"})
        loop = e.pvc("db", sc="loop", size="64Mi", modes=("ReadWriteOnce",),
                     provisioner="flexvol/loop",
                     annotations={"volume.kubernetes.io/selected-node": "node-a"})
        R.wait_for(lambda: e.bound(c) and e.bound(loop), "both bound")
        R.wait_for(lambda: "pvc-%s.img" % loop["metadata"]["uid"] in
                   e.st.get("configmaps", "node-a", "flexvol-loop").get("data", {}), "reported")
        for res, kind in KIND.items():
            for o in e.st.items(res):
                write(kind, json.dumps(o, indent=1).encode())
        # released: the PV as the agent and the controller meet it then
        e.st.api_delete("persistentvolumeclaims", "team-a", "data")
        time.sleep(2)
        with e.st.lock:
            frames = [(json.dumps({"type": t, "object": o}) + "\n").encode()
                      for (_, res, t, o) in e.st.history
                      if res in ("persistentvolumeclaims", "persistentvolumes")]
        for o in e.st.items("persistentvolumes"):
            write("pv", json.dumps(o).encode())
        # the watch target's first byte is the piece size: whole, 7-byte and 200-byte pieces
        for i in range(0, len(frames), 4):
            for piece in (0, 7, 200):
                write("watch", bytes([piece]) + b"".join(frames[i:i + 4]))
        write("watch", b"\x00" + (json.dumps({"type": "ERROR", "object": {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "too old resource version: 1 (2)", "reason": "Expired",
            "code": 410}}) + "\n").encode())
        write("watch", b"\x00" + (json.dumps({"type": "BOOKMARK", "object": {
            "kind": "PersistentVolume", "apiVersion": "v1", "metadata": {
                "resourceVersion": "12345",
                "annotations": {"k8s.io/initial-events-end": "false"}}}}) + "\n").encode())
    finally:
        e.close()


if __name__ == "__main__":
    main()
