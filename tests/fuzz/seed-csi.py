#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Seed the corpora of the csi-identity, csi-node and csi-controller fuzz targets
(tests/fuzz/README.md, tests/fuzz/fuzz-csi.c).

An input is: byte 0 the method (its index in csi/identity.c's, node.c's or controller.c's
table), byte 1 the driver profile (fuzz-csi.c's profiles[]: loop, nfs, nfs --root/--share
IPv4 and IPv6, iscsi), 32 bytes of the stubs' script (all 0 here: every call below the
service succeeds), then the request message.  Each request goes in once per profile.

Two sources:
  - the request messages of corpus/grpc-request/ (what a real grpc-go client, csi-call,
    sent for every CSI method: tests/fuzz/seed-grpc.py), those of the three services;
  - well-formed requests as kubelet and the sidecars send them (their paths, IDs, contexts,
    capabilities; tests/csi/run-node's and csi-sanity's calls have the same shapes), encoded
    here from csi/spec/csi.proto by its field numbers, so that the mutator starts past the
    checks, at the calls into the op layer.

  tests/fuzz/seed-csi.py [--out tests/fuzz/corpus]
"""
import argparse
import hashlib
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPT = 32
PROFILES = 5
SERVICES = {"csi-identity": "identity.c", "csi-node": "node.c", "csi-controller": "controller.c"}
GRPC_SERVICES = ["Identity", "Node", "Controller", "GroupController", "SnapshotMetadata"]

# --- csi.proto, as far as requests need it ------------------------------------------------------

SCALARS = {"double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64",
           "fixed32", "fixed64", "sfixed32", "sfixed64", "bool", "string", "bytes"}


class Proto:
    def __init__(self, path):
        text = open(path).read()
        text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
        text = re.sub(r"//[^\n]*", " ", text)
        self.toks = re.findall(r'"(?:[^"\\]|\\.)*"|[A-Za-z_.][A-Za-z0-9_.]*|-?\d+|[{}()\[\]<>=;,]',
                               text)
        self.i = 0
        self.messages = {}  # full name -> {field name: (number, type, kind, scope)}
        self.enums = {}     # full name -> {value name: number}
        self.block("csi.v1", None)

    def next(self):
        t = self.toks[self.i]
        self.i += 1
        return t

    def skip_to(self, end):
        """past the token @end (";", or the "}" or "]" closing the block that starts here)"""
        depth = 0
        while True:
            t = self.next()
            if t in ("{", "["):
                depth += 1
            elif t in ("}", "]"):
                depth -= 1
                if depth == 0 and t == end:
                    return
            elif t == end and depth == 0:
                return

    def field(self, scope, msg, first):
        kind = ""
        if first in ("repeated", "optional"):
            kind = "repeated" if first == "repeated" else ""
            first = self.next()
        if first == "map":
            self.next()  # <
            k, _, v = self.next(), self.next(), self.next()
            self.next()  # >
            typ, kind = (k, v), "map"
        else:
            typ = first
        name = self.next()
        assert self.next() == "="
        num = int(self.next())
        t = self.next()
        if t == "[":
            self.i -= 1
            self.skip_to("]")
            t = self.next()
        assert t == ";", t
        self.messages[msg][name] = (num, typ, kind, scope)

    def block(self, scope, msg):
        while self.i < len(self.toks):
            t = self.next()
            if t == "}":
                return
            if t == "message":
                name = scope + "." + self.next()
                self.messages[name] = {}
                self.next()  # {
                self.block(name, name)
            elif t == "enum":
                name = scope + "." + self.next()
                vals = self.enums[name] = {}
                self.next()  # {
                while True:
                    v = self.next()
                    if v == "}":
                        break
                    if v in ("option", "reserved"):
                        self.skip_to(";")
                        continue
                    self.next()  # =
                    vals[v] = int(self.next())
                    t = self.next()
                    if t == "[":
                        self.i -= 1
                        self.skip_to("]")
                        t = self.next()
            elif t == "oneof":
                self.next()
                self.next()  # {
                while True:
                    v = self.next()
                    if v == "}":
                        break
                    if v == "option":
                        self.skip_to(";")
                        continue
                    self.field(scope, msg, v)
            elif t in ("extend", "service"):
                self.next()
                self.skip_to("}")
            elif t in ("syntax", "package", "import", "option", "reserved"):
                self.skip_to(";")
            else:
                self.field(scope, msg, t)

    def resolve(self, name, scope):
        if name.startswith("."):
            return name[1:]
        while True:
            cand = (scope + "." if scope else "") + name
            if cand in self.messages or cand in self.enums:
                return cand
            if not scope:
                raise KeyError(name)
            scope = scope.rpartition(".")[0]

    def encode(self, msg, d):
        out = b""
        for name, val in d.items():
            num, typ, kind, scope = self.messages[msg][name]
            if kind == "map":
                for k, v in val.items():
                    entry = self.value(1, typ[0], k, scope) + self.value(2, typ[1], v, scope)
                    out += key(num, 2) + varint(len(entry)) + entry
            elif kind == "repeated":
                for v in val:
                    out += self.value(num, typ, v, scope)
            else:
                out += self.value(num, typ, val, scope)
        return out

    def value(self, num, typ, v, scope):
        if typ in ("string", "bytes"):
            b = v.encode() if isinstance(v, str) else v
            return key(num, 2) + varint(len(b)) + b
        if typ in ("int32", "int64", "uint32", "uint64", "bool"):
            return key(num, 0) + varint(int(v))
        if typ in SCALARS:
            raise ValueError("no encoding of %s here" % typ)
        full = self.resolve(typ, scope)
        if full in self.enums:
            return key(num, 0) + varint(self.enums[full][v] if isinstance(v, str) else v)
        b = self.encode(full, v)
        return key(num, 2) + varint(len(b)) + b


def varint(v):
    v &= (1 << 64) - 1
    out = b""
    while True:
        b = v & 0x7f
        v >>= 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def key(num, wire):
    return varint(num << 3 | wire)


# --- the requests --------------------------------------------------------------------------------

GI = 1 << 30
STAGING = "/var/lib/kubelet/plugins/kubernetes.io/csi/loop.csi.flexvol/3c1b7f1e9a/globalmount"
TARGET = "/var/lib/kubelet/pods/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0/volumes/kubernetes.io~csi/" \
         "pvc-5d8e7c64-8b2a-4f3e-9c1d-2b7a6e5f4d3c/mount"
BLOCK_TARGET = "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/publish/" \
               "pvc-5d8e7c64-8b2a-4f3e-9c1d-2b7a6e5f4d3c/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
VOL = "pvc-5d8e7c64-8b2a-4f3e-9c1d-2b7a6e5f4d3c"
SNAP = "snapshot-9e8d7c6b-5a49-3827-1605-f4e3d2c1b0a9"


def cap(mode="SINGLE_NODE_WRITER", fs="ext4", block=False):
    c = {"access_mode": {"mode": mode}}
    if block:
        c["block"] = {}
    else:
        c["mount"] = {"fs_type": fs} if fs else {}
    return c


LOOP_CTX = {"file": VOL + ".img", "csi.storage.k8s.io/pv/name": VOL}
NFS_CTX = {"server": "192.0.2.10", "share": "/export/k8s", "subPath": VOL}
ISCSI_CTX = {"targetPortal": "192.0.2.7:3260", "iqn": "iqn.2003-01.org.linux-iscsi.t:sn.1",
             "lun": "1", "fsType": "ext4"}
CHAP = {"node.session.auth.username": "u", "node.session.auth.password": "p4ssw0rd"}
TOPO = {"segments": {"topology.loop.csi.flexvol/node": "node-1"}}
SIDECAR = {"csi.storage.k8s.io/pvc/name": "data", "csi.storage.k8s.io/pvc/namespace": "default",
           "csi.storage.k8s.io/pv/name": VOL}


def requests():
    """(service target, method, request dict)"""
    node = [
        ("NodeStageVolume", {"volume_id": VOL, "staging_target_path": STAGING,
                             "volume_capability": cap(), "volume_context": LOOP_CTX}),
        ("NodeStageVolume", {"volume_id": VOL, "staging_target_path": STAGING,
                             "volume_capability": cap(block=True), "volume_context": LOOP_CTX,
                             "publish_context": {"device": "/dev/loop3"}}),
        ("NodeStageVolume", {"volume_id": VOL, "staging_target_path": STAGING,
                             "volume_capability": cap("SINGLE_NODE_READER_ONLY", "xfs"),
                             "volume_context": ISCSI_CTX, "secrets": CHAP}),
        ("NodeUnstageVolume", {"volume_id": VOL, "staging_target_path": STAGING}),
        ("NodePublishVolume", {"volume_id": VOL, "staging_target_path": STAGING,
                               "target_path": TARGET, "volume_capability": cap(),
                               "volume_context": LOOP_CTX}),
        ("NodePublishVolume", {"volume_id": VOL, "staging_target_path": STAGING,
                               "target_path": BLOCK_TARGET, "readonly": True,
                               "volume_capability": cap(block=True), "volume_context": LOOP_CTX}),
        ("NodePublishVolume", {"volume_id": VOL, "target_path": TARGET,
                               "volume_capability": cap("MULTI_NODE_MULTI_WRITER", ""),
                               "volume_context": NFS_CTX}),
        ("NodePublishVolume", {"volume_id": VOL, "target_path": TARGET, "readonly": True,
                               "volume_capability": cap("MULTI_NODE_READER_ONLY", ""),
                               "volume_context": NFS_CTX}),
        ("NodeUnpublishVolume", {"volume_id": VOL, "target_path": TARGET}),
        ("NodeExpandVolume", {"volume_id": VOL, "volume_path": TARGET,
                              "staging_target_path": STAGING,
                              "capacity_range": {"required_bytes": 2 * GI},
                              "volume_capability": cap()}),
        ("NodeGetVolumeStats", {"volume_id": VOL, "volume_path": TARGET,
                                "staging_target_path": STAGING}),
        ("NodeGetVolumeStats", {"volume_id": VOL, "volume_path": STAGING,
                                "staging_target_path": STAGING}),
        ("NodeGetCapabilities", {}),
        ("NodeGetInfo", {}),
    ]
    controller = [
        ("CreateVolume", {"name": VOL, "capacity_range": {"required_bytes": GI},
                          "volume_capabilities": [cap()],
                          "parameters": dict(SIDECAR, preallocate="false", overcommit="1.5"),
                          "accessibility_requirements": {"requisite": [TOPO],
                                                         "preferred": [TOPO]}}),
        ("CreateVolume", {"name": VOL, "capacity_range": {"required_bytes": GI,
                                                           "limit_bytes": 2 * GI},
                          "volume_capabilities": [cap("MULTI_NODE_MULTI_WRITER", "")],
                          "parameters": SIDECAR}),
        ("CreateVolume", {"name": "pvc-0a1b2c3d-restore", "volume_capabilities": [cap()],
                          "volume_content_source": {"snapshot": {"snapshot_id": SNAP}}}),
        ("CreateVolume", {"name": "pvc-0a1b2c3d-clone", "capacity_range": {"required_bytes": GI},
                          "volume_capabilities": [cap(block=True)],
                          "volume_content_source": {"volume": {"volume_id": VOL}}}),
        ("DeleteVolume", {"volume_id": VOL}),
        ("ControllerPublishVolume", {"volume_id": VOL, "node_id": "node-1",
                                     "volume_capability": cap(), "volume_context": ISCSI_CTX,
                                     "secrets": CHAP}),
        ("ControllerUnpublishVolume", {"volume_id": VOL, "node_id": "node-1"}),
        ("ValidateVolumeCapabilities", {"volume_id": VOL, "volume_capabilities": [cap()],
                                        "volume_context": LOOP_CTX, "parameters": SIDECAR}),
        ("GetCapacity", {"volume_capabilities": [cap()], "parameters": {"overcommit": "2"},
                         "accessible_topology": TOPO}),
        ("ControllerExpandVolume", {"volume_id": VOL, "capacity_range": {"required_bytes": 3 * GI},
                                    "volume_capability": cap()}),
        ("CreateSnapshot", {"source_volume_id": VOL, "name": SNAP,
                            "parameters": {"csi.storage.k8s.io/volumesnapshot/name": "s1"}}),
        ("DeleteSnapshot", {"snapshot_id": SNAP}),
        ("ListSnapshots", {"max_entries": 2, "starting_token": "1", "source_volume_id": VOL}),
        ("ListSnapshots", {"snapshot_id": SNAP}),
        ("ControllerGetCapabilities", {}),
    ]
    identity = [("GetPluginInfo", {}), ("GetPluginCapabilities", {}), ("Probe", {})]
    return ([("csi-identity", m, q) for m, q in identity] +
            [("csi-node", m, q) for m, q in node] +
            [("csi-controller", m, q) for m, q in controller])


def tables():
    """{target: [method name, ...]} in the order of csi/<service>.c's method table"""
    out = {}
    for t, f in SERVICES.items():
        text = open(os.path.join(ROOT, "csi", f)).read()
        out[t] = re.findall(r'"/csi\.v1\.\w+/(\w+)"', text)
    return out


def grpc_methods():
    """fuzz-grpc.c's method table: csi.proto's services in order (as seed-grpc.py)"""
    text = open(os.path.join(ROOT, "csi", "spec", "csi.proto")).read()
    by_svc = {}
    for m in re.finditer(r"(?ms)^service (\w+) \{(.*?)^\}", text):
        by_svc[m.group(1)] = re.findall(r"rpc\s+(\w+)\s*\(", m.group(2))
    return [(s, n) for s in GRPC_SERVICES for n in by_svc[s]]


def save(d, data):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "corpus"))
    a = ap.parse_args()
    proto = Proto(os.path.join(ROOT, "csi", "spec", "csi.proto"))
    tab = tables()
    msgs = []
    # what csi-call sent
    gm = grpc_methods()
    by_svc = {"Identity": "csi-identity", "Node": "csi-node", "Controller": "csi-controller"}
    src = os.path.join(HERE, "corpus", "grpc-request")
    for f in sorted(os.listdir(src)):
        data = open(os.path.join(src, f), "rb").read()
        if len(data) < 2:
            continue
        svc, name = gm[data[0] % len(gm)]
        if svc in by_svc and name in tab[by_svc[svc]]:
            msgs.append((by_svc[svc], name, data[2:]))
    # well-formed requests
    for t, m, q in requests():
        msgs.append((t, m, proto.encode("csi.v1.%sRequest" % m, q)))
    n = {}
    for t, m, body in msgs:
        for p in range(PROFILES):
            save(os.path.join(a.out, t), bytes([tab[t].index(m), p]) + bytes(SCRIPT) + body)
        n[t] = n.get(t, 0) + 1
    for t in sorted(n):
        print("%s: %d requests, %d inputs" % (t, n[t], n[t] * PROFILES))


if __name__ == "__main__":
    main()
