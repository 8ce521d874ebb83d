#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Seed the corpora of the grpc-wire and grpc-request fuzz targets (tests/fuzz/README.md).

A real gRPC client (tests/csi/csi-call: grpc-go, as kubelet and the sidecars) makes one call of
every CSI method, and a few malformed bodies, against a real flexvol-csi --driver loop in a
scratch directory, through a relay that records what the client sent.  Nothing on the host
changes: each call is refused before the op layer does anything (no staging directory, a
block capability, IDs of no volume) or only looks.

  grpc-wire/      one file per connection: byte 0 (the piece size, 0: whole), then the bytes
  grpc-request/   one file per request message: byte 0 the method's index in
                  tests/fuzz/fuzz-grpc.c's table (Identity, Node, Controller, GroupController,
                  SnapshotMetadata, each in csi.proto's order), byte 1 (piece size 0), the message

  tests/fuzz/seed-grpc.py --build build [--out tests/fuzz/corpus]
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SERVICES = ["Identity", "Node", "Controller", "GroupController", "SnapshotMetadata"]


def method_table():
    """["/csi.v1.Identity/GetPluginInfo", ...] in the fuzz target's order"""
    text = open(os.path.join(ROOT, "csi", "spec", "csi.proto")).read()
    by_svc = {}
    for m in re.finditer(r"(?ms)^service (\w+) \{(.*?)^\}", text):
        by_svc[m.group(1)] = re.findall(r"rpc\s+(\w+)\s*\(", m.group(2))
    return ["/csi.v1.%s/%s" % (s, n) for s in SERVICES for n in by_svc[s]]


BLOCK = {"block": {}, "accessMode": {"mode": "SINGLE_NODE_WRITER"}}
MOUNT = {"mount": {"fsType": "ext4", "mountFlags": ["noatime"], "volumeMountGroup": "1000"},
         "accessMode": {"mode": "MULTI_NODE_MULTI_WRITER"}}
TOPO = {"requisite": [{"segments": {"topology.loop.csi.flexvol/node": "n1"}}],
        "preferred": [{"segments": {"topology.loop.csi.flexvol/node": "n2", "zone": "a"}}]}
CTX = {"file": "pvc-x.img", "size": "64Mi", "server": "192.0.2.1", "subPath": "a/b"}
SECRETS = {"chapUser": "u", "chapPassword": "p"}


def requests(scratch):
    """(method, request JSON) of every call made"""
    nowhere = os.path.join(scratch, "no", "such")
    return [
        ("/csi.v1.Identity/GetPluginInfo", {}),
        ("/csi.v1.Identity/GetPluginCapabilities", {}),
        ("/csi.v1.Identity/Probe", {}),
        ("/csi.v1.Node/NodeStageVolume", {"volumeId": "pvc-x", "stagingTargetPath": nowhere,
                                          "volumeCapability": BLOCK, "volumeContext": CTX,
                                          "secrets": SECRETS, "publishContext": {"device": "/dev/x"}}),
        ("/csi.v1.Node/NodeUnstageVolume", {"volumeId": "../x", "stagingTargetPath": nowhere}),
        ("/csi.v1.Node/NodePublishVolume", {"volumeId": "pvc-x", "stagingTargetPath": nowhere,
                                            "targetPath": nowhere + "/t", "volumeCapability": MOUNT,
                                            "readonly": True, "volumeContext": CTX}),
        ("/csi.v1.Node/NodeUnpublishVolume", {"volumeId": "pvc-x", "targetPath": nowhere}),
        ("/csi.v1.Node/NodeGetVolumeStats", {"volumeId": "pvc-x", "volumePath": nowhere,
                                             "stagingTargetPath": nowhere}),
        ("/csi.v1.Node/NodeExpandVolume", {"volumeId": "pvc-x", "volumePath": nowhere,
                                           "capacityRange": {"requiredBytes": "1073741824",
                                                             "limitBytes": "2147483648"},
                                           "volumeCapability": MOUNT}),
        ("/csi.v1.Node/NodeGetCapabilities", {}),
        ("/csi.v1.Node/NodeGetInfo", {}),
        ("/csi.v1.Controller/CreateVolume", {"name": "pvc-x", "capacityRange": {"requiredBytes": "1"},
                                             "volumeCapabilities": [BLOCK, MOUNT],
                                             "parameters": {"preallocate": "yes"}, "secrets": SECRETS,
                                             "volumeContentSource": {"snapshot": {"snapshotId": "s1"}},
                                             "accessibilityRequirements": TOPO,
                                             "mutableParameters": {"iops": "5"}}),
        ("/csi.v1.Controller/DeleteVolume", {"volumeId": "../x", "secrets": SECRETS}),
        ("/csi.v1.Controller/ControllerPublishVolume", {"volumeId": "pvc-x", "nodeId": "n1",
                                                        "volumeCapability": BLOCK, "readonly": True,
                                                        "volumeContext": CTX}),
        ("/csi.v1.Controller/ControllerUnpublishVolume", {"volumeId": "pvc-x", "nodeId": "n1"}),
        ("/csi.v1.Controller/ValidateVolumeCapabilities", {"volumeId": "pvc-none",
                                                           "volumeCapabilities": [MOUNT],
                                                           "parameters": {"a": "b"}}),
        ("/csi.v1.Controller/ListVolumes", {"maxEntries": 10, "startingToken": "t"}),
        ("/csi.v1.Controller/GetCapacity", {"volumeCapabilities": [MOUNT],
                                            "accessibleTopology": TOPO["requisite"][0]}),
        ("/csi.v1.Controller/ControllerGetCapabilities", {}),
        ("/csi.v1.Controller/CreateSnapshot", {"sourceVolumeId": "pvc-x", "name": "s1"}),
        ("/csi.v1.Controller/DeleteSnapshot", {"snapshotId": "s1"}),
        ("/csi.v1.Controller/ListSnapshots", {"sourceVolumeId": "pvc-x", "maxEntries": 3}),
        ("/csi.v1.Controller/ControllerExpandVolume", {"volumeId": "pvc-none", "capacityRange":
                                                       {"requiredBytes": "2147483648"},
                                                       "volumeCapability": MOUNT}),
        ("/csi.v1.Controller/ControllerGetVolume", {"volumeId": "pvc-none"}),
        ("/csi.v1.Controller/ControllerModifyVolume", {"volumeId": "pvc-none",
                                                       "mutableParameters": {"iops": "5"}}),
        ("/csi.v1.GroupController/GroupControllerGetCapabilities", {}),
        ("/csi.v1.GroupController/CreateVolumeGroupSnapshot", {"name": "g", "sourceVolumeIds":
                                                               ["pvc-x", "pvc-y"]}),
        ("/csi.v1.SnapshotMetadata/GetMetadataAllocated", {"snapshotId": "s1", "startingOffset": "4096",
                                                           "maxResults": 8}),
    ]


def frame(msg, flag=0, length=None):
    return bytes([flag]) + (len(msg) if length is None else length).to_bytes(4, "big") + msg


RAW = [  # request bodies sent as they are (tests/csi/run-node's wire_malformed)
    ("/csi.v1.Identity/Probe", b"\0\0\0"),
    ("/csi.v1.Identity/Probe", frame(b"", flag=1)),
    ("/csi.v1.Identity/Probe", frame(b"", length=10)),
    ("/csi.v1.Identity/Probe", frame(b"") + frame(b"")),
    ("/csi.v1.Node/NodeStageVolume", frame(b"\x0a\x03a\x00b")),
    ("/csi.v1.Node/NodeStageVolume", frame(b"\x32\x09\x0a\x01k\x12\x04a\x00/x")),
    ("/csi.v1.Node/NoSuchThing", frame(b"")),
]


class Relay:
    """a unix socket in front of the endpoint's; records what each client sends"""

    def __init__(self, path, target):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(8)
        self.target = target
        self.sessions = []
        self.lock = threading.Lock()
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.one, args=(c,), daemon=True).start()

    def one(self, c):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(self.target)
        sent = bytearray()
        done = threading.Event()

        def back():
            while True:
                try:
                    b = s.recv(65536)
                    if not b:
                        break
                    c.sendall(b)
                except OSError:
                    break
            done.set()
            try:
                c.shutdown(socket.SHUT_WR)
            except OSError:
                pass

        threading.Thread(target=back, daemon=True).start()
        try:
            while True:
                b = c.recv(65536)
                if not b:
                    break
                sent += b
                s.sendall(b)
            s.shutdown(socket.SHUT_WR)
        except OSError:  # the client reset it (went with bytes unread), or the endpoint closed
            pass
        done.wait(10)
        c.close()
        s.close()
        with self.lock:
            self.sessions.append(bytes(sent))


def data_of(session):
    """the DATA bytes of stream 1 in the client's bytes (after the 24-byte preface)"""
    buf, out = session[24:], b""
    while len(buf) >= 9:
        n = int.from_bytes(buf[:3], "big")
        ftype, sid = buf[3], int.from_bytes(buf[5:9], "big") & 0x7fffffff
        if ftype == 0 and sid == 1:
            out += buf[9:9 + n]
        buf = buf[9 + n:]
    return out


def save(d, data):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--out", default=os.path.join(HERE, "corpus"))
    a = ap.parse_args()
    call = os.path.join(os.path.dirname(subprocess.run(
        [os.path.join(ROOT, "tests", "csi", "build")], check=True, stdout=subprocess.PIPE,
        text=True).stdout.strip().splitlines()[-1]), "csi-call")
    table = method_table()
    scratch = tempfile.mkdtemp(prefix="flexvol-seed-grpc.")
    for d in ("root", "state", "run"):
        os.mkdir(os.path.join(scratch, d))
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "FLEXVOL_CONFIG": "/dev/null",
           "FLEXVOL_LOOP_ROOT": os.path.join(scratch, "root"),
           "FLEXVOL_STATE_DIR": os.path.join(scratch, "state"),
           "FLEXVOL_RUN_DIR": os.path.join(scratch, "run"),
           "FLEXVOL_LOG_FILE": os.path.join(scratch, "driver.log"), "FLEXVOL_NODE_NAME": "n1"}
    sock, relay_sock = os.path.join(scratch, "csi.sock"), os.path.join(scratch, "relay.sock")
    log = open(os.path.join(scratch, "endpoint.log"), "w")
    ep = subprocess.Popen([os.path.join(os.path.abspath(a.build), "flexvol-csi"), "--endpoint",
                           "unix://" + sock, "--driver", "loop"], env=env, stdout=log, stderr=log)
    try:
        while not os.path.exists(sock):
            time.sleep(0.05)
        relay = Relay(relay_sock, sock)
        wire = request = 0
        for method, req in requests(scratch):
            n = len(relay.sessions)
            r = subprocess.run([call, "-endpoint", "unix://" + relay_sock, method, json.dumps(req)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
            if r.returncode not in (0,) and r.returncode < 100:
                print("skipped %s: %s" % (method, r.stderr.strip()))
                continue
            while len(relay.sessions) == n:
                time.sleep(0.02)
            s = relay.sessions[-1]
            save(os.path.join(a.out, "grpc-wire"), b"\0" + s)
            body = data_of(s)
            save(os.path.join(a.out, "grpc-request"), bytes([table.index(method), 0]) + body[5:])
            wire += 1
            request += 1
        for method, body in RAW:
            n = len(relay.sessions)
            f = os.path.join(scratch, "body")
            with open(f, "wb") as fh:
                fh.write(body)
            subprocess.run([call, "-endpoint", "unix://" + relay_sock, "-raw-file", f, method],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
            while len(relay.sessions) == n:
                time.sleep(0.02)
            save(os.path.join(a.out, "grpc-wire"), b"\0" + relay.sessions[-1])
            wire += 1
        print("seed-grpc: %d connections (grpc-wire), %d messages (grpc-request)" % (wire, request))
    finally:
        ep.terminate()
        ep.wait(timeout=30)
        log.close()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
