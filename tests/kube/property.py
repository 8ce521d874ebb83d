#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Property test: flexvol-provisioner against a real API server, under random changes.

    python3 tests/kube/property.py --build build [--bin DIR] [--seed N] [--long]
                                   [--steps N] [--seconds S] [--fake]

It starts etcd, kube-apiserver and kube-controller-manager (only its persistent-volume
controllers: the binder hands claims over with volume.kubernetes.io/storage-provisioner, binds
them and releases the PVs of deleted claims; the claim and PV protection controllers lift their
finalizers) from the cluster lane's binaries (tests/kube/build; --bin), on loopback ports of
their own and a state directory of their own, so it never meets a running cluster lane; no
kubelet, no scheduler: the test plays the scheduler by setting volume.kubernetes.io/selected-node.
Then flexvol-provisioner (nfs and loop, with a temporary directory as the share, --root) and a
loop node agent (node-a, a temporary loop root) run while random valid and invalid
StorageClasses, claims, nodes and node space reports are created, changed and deleted, with
kill -9 of the provisioner or the agent and restarts mixed in.  Every step is printed; the seed
is printed first and --seed N replays the same steps.  Bounded by --steps and --seconds.

Invariants, checked once the steps are done and everything had time to settle:
  - no process exited but those the test killed;
  - every claim handed over to us ends with exactly one PV, or with an event that says why not;
  - no PV for a claim that must be refused (its class is invalid by construction);
  - no directory under the share and no image in the agent's loop root without an owner (a PV
    naming it; archived-* directories are the archive policy's own).

--fake runs the same against tests/provisioner/fakeapi.py (no binaries: a check of the test
itself).  Prints "property: N passed, N failed" last (one case per invariant).
"""

import argparse
import json
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "provisioner"))

NFS, LOOP = "flexvol/nfs", "flexvol/loop"
ANN_SP = "volume.kubernetes.io/storage-provisioner"
ANN_NODE = "volume.kubernetes.io/selected-node"
LOOP_NS = "flexvol-loop"
NAMESPACES = ["ns-a", "ns-b"]
AGENT_NODE = "node-a"      # a Node with a running agent and a real loop root
REPORT_NODE = "node-b"     # a Node whose space report the test writes (no agent)
GHOST_NODE = "node-ghost"  # never a Node
TOKEN = "flexvol-property-" + uuid.uuid4().hex


def log(msg):
    print("property: " + msg, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kill_pid(pr, sig=signal.SIGTERM, timeout=15):
    """End @pr (a Popen) by its PID: @sig, then SIGKILL."""
    if pr.poll() is None:
        try:
            pr.send_signal(sig)
            pr.wait(timeout)
        except subprocess.TimeoutExpired:
            pr.kill()
            pr.wait()


class Api:
    """Just enough of a REST client: JSON in, (status, JSON) out; bearer token, our CA."""

    def __init__(self, url, ca):
        self.url = url
        self.ctx = ssl.create_default_context(cafile=ca)

    def call(self, method, path, body=None, ctype="application/json"):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", "Bearer " + TOKEN)
        if data is not None:
            req.add_header("Content-Type", ctype)
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=30) as r:
                raw = r.read()
                # /readyz and /healthz answer plain text ("ok")
                if not r.headers.get("Content-Type", "").startswith("application/json"):
                    return r.status, raw.decode(errors="replace")
                return r.status, json.loads(raw or b"null")
        except urllib.error.HTTPError as e:
            try:
                return e.code, json.loads(e.read() or b"null")
            except ValueError:
                return e.code, None

    def get(self, path):
        st, o = self.call("GET", path)
        return o if st == 200 else None

    def items(self, path):
        o = self.get(path)
        return (o or {}).get("items") or []

    def create(self, path, obj):
        return self.call("POST", path, obj)[0]

    def delete(self, path):
        return self.call("DELETE", path)[0]

    def merge(self, path, patch):
        return self.call("PATCH", path, patch, "application/merge-patch+json")[0]


def make_cert(d):
    cert, key = os.path.join(d, "serving.crt"), os.path.join(d, "serving.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", key, "-out", cert], check=True, capture_output=True)
    return cert, key


class RealApiServer:
    """etcd, kube-apiserver and the controller-manager's PV controllers, on ports of their own."""

    def __init__(self, bindir, tmp, apiserver_args=(), kcm_args=(), private_bin=False):
        """@apiserver_args, @kcm_args: more flags for kube-apiserver, kube-controller-manager
        (tests/bench/provisioner-scale.py: the audit log).  @private_bin: run the binaries
        from hard links in @tmp: the cluster lane's teardown stops every process whose
        executable is its bin dir's (tests/kube/cluster.py, its stray sweep), ours too,
        whenever a lane run on this machine ends."""
        if private_bin:
            own = os.path.join(tmp, "bin")
            os.mkdir(own)
            for n in ("etcd", "kube-apiserver", "kube-controller-manager"):
                try:
                    os.link(os.path.join(bindir, n), os.path.join(own, n))
                except OSError:  # another file system
                    shutil.copy2(os.path.join(bindir, n), os.path.join(own, n))
            bindir = own
        self.bindir, self.tmp, self.procs = bindir, tmp, {}
        self.apiserver_args, self.kcm_args = list(apiserver_args), list(kcm_args)
        self.cert, self.key = make_cert(tmp)

    def up(self):
        tmp = self.tmp
        sa = os.path.join(tmp, "sa.key")
        subprocess.run(["openssl", "genrsa", "-out", sa, "2048"], check=True, capture_output=True)
        with open(os.path.join(tmp, "tokens.csv"), "w") as f:
            f.write('%s,flexvol-property,flexvol-property,"system:masters"\n' % TOKEN)
        ec, ep, ap = free_port(), free_port(), free_port()
        self.url = "https://127.0.0.1:%d" % ap
        etcd = "http://127.0.0.1:%d" % ec
        self.start("etcd", ["etcd", "--name", "property", "--data-dir", os.path.join(tmp, "etcd"),
                            "--listen-client-urls", etcd, "--advertise-client-urls", etcd,
                            "--listen-peer-urls", "http://127.0.0.1:%d" % ep,
                            "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % ep,
                            "--initial-cluster", "property=http://127.0.0.1:%d" % ep,
                            "--unsafe-no-fsync", "--log-level", "warn"])
        self.start("kube-apiserver", [
            "kube-apiserver", "--etcd-servers=" + etcd, "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1", "--secure-port=%d" % ap,
            "--tls-cert-file=" + self.cert, "--tls-private-key-file=" + self.key,
            "--token-auth-file=" + os.path.join(tmp, "tokens.csv"),
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file=" + sa, "--service-account-signing-key-file=" + sa,
            "--service-cluster-ip-range=10.0.0.0/24", "--endpoint-reconciler-type=none",
            "--profiling=false", "--v=1"] + self.apiserver_args)
        self.api = Api(self.url, self.cert)
        end = time.monotonic() + 120
        while not self.ready():  # an exited component fails at once (alive() raises)
            if time.monotonic() > end:
                raise TimeoutError("kube-apiserver not ready within 120 s")
            time.sleep(0.5)
        kc = os.path.join(tmp, "kcm.kubeconfig")
        with open(kc, "w") as f:
            f.write("apiVersion: v1\nkind: Config\nclusters:\n- name: p\n  cluster:\n"
                    "    server: %s\n    certificate-authority: %s\nusers:\n- name: p\n  user:\n"
                    "    token: %s\ncontexts:\n- name: p\n  context: {cluster: p, user: p}\n"
                    "current-context: p\n" % (self.url, self.cert, TOKEN))
        self.start("kube-controller-manager", [
            "kube-controller-manager", "--kubeconfig=" + kc, "--leader-elect=false",
            "--secure-port=0", "--use-service-account-credentials=false",
            "--controllers=persistentvolume-binder,pvc-protection,pv-protection", "--v=1"]
            + self.kcm_args)

    def ready(self):
        self.alive(*self.procs)
        try:
            return self.api.call("GET", "/readyz")[0] == 200
        except OSError:
            return False

    def start(self, name, argv):
        logf = open(os.path.join(self.tmp, name + ".log"), "ab")
        self.procs[name] = subprocess.Popen([os.path.join(self.bindir, argv[0])] + argv[1:],
                                            stdin=subprocess.DEVNULL, stdout=logf,
                                            stderr=subprocess.STDOUT, start_new_session=True,
                                            cwd=self.tmp)
        logf.close()

    def alive(self, *names):
        for n in names:
            if self.procs[n].poll() is not None:
                raise RuntimeError("%s exited (%s); its log ends:\n%s" % (
                    n, self.procs[n].returncode, tail(os.path.join(self.tmp, n + ".log"))))
        return True

    def logs(self):
        return "".join("--- %s.log ends:\n%s" % (n, tail(os.path.join(self.tmp, n + ".log")))
                       for n in self.procs)

    def close(self):
        for n in ["kube-controller-manager", "kube-apiserver", "etcd"]:
            if n in self.procs:
                kill_pid(self.procs[n])


class FakeApiServer:
    """tests/provisioner/fakeapi.py, with its built-in PV controller (a check of the test)."""

    def __init__(self, tmp):
        from fakeapi import FakeAPI
        self.cert, key = make_cert(tmp)
        self.fake = FakeAPI(self.cert, key, TOKEN)
        self.url = self.fake.url
        self.api = Api(self.url, self.cert)

    def alive(self, *names):
        return True

    def logs(self):
        return ""

    def close(self):
        self.fake.close()


def tail(path, n=15):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


class Proc:
    """A flexvol-provisioner process the test starts, kills and restarts."""

    def __init__(self, name, argv, tmp):
        self.name, self.argv, self.tmp = name, argv, tmp
        self.p, self.n = None, 0
        self.unexpected = []

    def start(self):
        self.n += 1
        logf = open(os.path.join(self.tmp, "%s-%d.log" % (self.name, self.n)), "w")
        self.p = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=logf,
                                  stderr=subprocess.STDOUT)
        logf.close()

    def check(self):
        """Did it exit without being told to?  Recorded, and started again."""
        if self.p is not None and self.p.poll() is not None:
            rc = self.p.returncode
            self.unexpected.append("%s (start %d) exited with %s; its log ends:\n%s" % (
                self.name, self.n, "signal %d" % -rc if rc < 0 else "status %d" % rc,
                tail(os.path.join(self.tmp, "%s-%d.log" % (self.name, self.n)))))
            self.start()

    def kill9(self):
        self.check()
        kill_pid(self.p, signal.SIGKILL)
        self.p = None

    def stop(self):
        if self.p is not None:
            self.check()
            kill_pid(self.p)
            self.p = None


# --- the random world ------------------------------------------------------------------------

def nfs_class(rnd, name, valid):
    params = {"server": rnd.choice(["nfs.example.com", "10.0.0.5"]),
              "share": rnd.choice(["/export/k8s", "/srv/nfs"])}
    for k, vals in (("onDelete", ["archive", "delete"]), ("mode", ["0777", "2770", "0700"]),
                    ("uid", ["0", "1234"]), ("gid", ["0", "5678"]),
                    ("readOnly", ["true", "false"]), ("nfsVersion", ["3", "4.1", "4.2"]),
                    ("mountOptions", ["hard,timeo=600", "soft"])):
        if rnd.random() < 0.3:
            params[k] = rnd.choice(vals)
    if not valid:
        rnd.choice([lambda: params.update(colour="blue"), lambda: params.update(mode="999"),
                    lambda: params.update(onDelete="shred"), lambda: params.pop("server"),
                    lambda: params.update(pathPattern="../${pvc}")])()
    o = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
         "provisioner": NFS, "reclaimPolicy": rnd.choice(["Delete", "Delete", "Retain"])}
    if params:
        o["parameters"] = params
    return o


def loop_class(rnd, name, valid):
    params = {}
    for k, vals in (("fsType", ["ext4", "xfs"]), ("preallocate", ["true", "false"]),
                    ("overcommit", ["true", "false"])):
        if rnd.random() < 0.4:
            params[k] = rnd.choice(vals)
    o = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
         "provisioner": LOOP, "volumeBindingMode": "WaitForFirstConsumer",
         "reclaimPolicy": rnd.choice(["Delete", "Delete", "Retain"])}
    if rnd.random() < 0.3:
        o["allowVolumeExpansion"] = True
    if not valid:
        rnd.choice([lambda: o.update(volumeBindingMode="Immediate"),
                    lambda: params.update(colour="blue"), lambda: params.update(fsType="btrfs"),
                    lambda: o.update(mountOptions=["ro"])])()
    if params:
        o["parameters"] = params
    return o


CLASSES = {  # name: (backend, valid)
    "nfs-1": (NFS, True), "nfs-2": (NFS, True), "nfs-bad": (NFS, False),
    "loop-1": (LOOP, True), "loop-2": (LOOP, True), "loop-bad": (LOOP, False),
}
SIZES = ["1", "100m", "1Mi", "100M", "64Mi", "1Gi", "3Gi", "1Ti", "1Ei"]
MODES = [["ReadWriteOnce"], ["ReadWriteMany"], ["ReadOnlyMany"], ["ReadWriteOncePod"],
         ["ReadWriteOnce", "ReadOnlyMany"]]


class World:
    def __init__(self, api, rnd, sizes):
        self.api, self.rnd, self.sizes = api, rnd, sizes
        self.claims = {}  # uid -> {"ns", "name", "class", "nodes": set of selected nodes}

    def claim_path(self, ns, name=""):
        return "/api/v1/namespaces/%s/persistentvolumeclaims%s" % (ns, "/" + name if name else "")

    def live_claims(self):
        return [c for ns in NAMESPACES for c in self.api.items(self.claim_path(ns))]

    # each action returns a line for the step log
    def class_create(self):
        name = self.rnd.choice(sorted(CLASSES))
        backend, valid = CLASSES[name]
        o = (nfs_class if backend == NFS else loop_class)(self.rnd, name, valid)
        st = self.api.create("/apis/storage.k8s.io/v1/storageclasses", o)
        return "class %s %s (%s): %s" % (name, "valid" if valid else "invalid",
                                         json.dumps(o.get("parameters", {}), sort_keys=True), st)

    def class_delete(self):
        name = self.rnd.choice(sorted(CLASSES))
        return "delete class %s: %s" % (name, self.api.delete(
            "/apis/storage.k8s.io/v1/storageclasses/" + name))

    def claim_create(self):
        ns = self.rnd.choice(NAMESPACES)
        name = "c%d" % self.rnd.randrange(1000)
        cls = self.rnd.choice(sorted(CLASSES) + ["no-such-class"])
        spec = {"accessModes": self.rnd.choice(MODES), "storageClassName": cls,
                "resources": {"requests": {"storage": self.rnd.choice(self.sizes)}}}
        if self.rnd.random() < 0.15:
            spec["volumeMode"] = "Block"
        meta = {"name": name, "namespace": ns}
        if self.rnd.random() < 0.3:
            meta["labels"] = {"app": self.rnd.choice(["db", "web", "x" * 63])}
        node = None
        if CLASSES.get(cls, (None,))[0] == LOOP and self.rnd.random() < 0.7:
            node = self.rnd.choice([AGENT_NODE, AGENT_NODE, REPORT_NODE, GHOST_NODE])
            meta["annotations"] = {ANN_NODE: node}
        st, o = self.api.call("POST", self.claim_path(ns), {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec})
        if st == 201:
            self.claims[o["metadata"]["uid"]] = {"ns": ns, "name": name, "class": cls,
                                                 "nodes": {node} if node else set()}
        return "claim %s/%s class %s %s %s node %s: %s" % (
            ns, name, cls, spec["resources"]["requests"]["storage"],
            ",".join(spec["accessModes"]), node, st)

    def pick_claim(self):
        cs = sorted(self.live_claims(), key=lambda c: c["metadata"]["uid"])
        return self.rnd.choice(cs) if cs else None

    def claim_schedule(self):
        """the scheduler's part: a pending claim without a selected node gets one"""
        c = self.pick_claim()
        if not c:
            return "schedule: no claim"
        m = c["metadata"]
        node = self.rnd.choice([AGENT_NODE, REPORT_NODE, GHOST_NODE])
        st = self.api.merge(self.claim_path(m["namespace"], m["name"]),
                            {"metadata": {"annotations": {ANN_NODE: node}}})
        if m["uid"] in self.claims:
            self.claims[m["uid"]]["nodes"].add(node)
        return "select node %s for %s/%s: %s" % (node, m["namespace"], m["name"], st)

    def claim_change(self):
        c = self.pick_claim()
        if not c:
            return "change: no claim"
        m = c["metadata"]
        if self.rnd.random() < 0.5:
            patch = {"metadata": {"labels": {"touched": str(self.rnd.randrange(100))}}}
        else:
            patch = {"spec": {"resources": {"requests": {"storage": self.rnd.choice(self.sizes)}}}}
        return "change %s/%s %s: %s" % (m["namespace"], m["name"], json.dumps(patch),
                                        self.api.merge(self.claim_path(m["namespace"], m["name"]),
                                                       patch))

    def claim_delete(self):
        c = self.pick_claim()
        if not c:
            return "delete claim: none"
        m = c["metadata"]
        return "delete claim %s/%s: %s" % (m["namespace"], m["name"],
                                           self.api.delete(self.claim_path(m["namespace"], m["name"])))

    def node_toggle(self):
        name = self.rnd.choice([REPORT_NODE, "node-c"])
        if self.api.get("/api/v1/nodes/" + name) and self.rnd.random() < 0.5:
            return "delete node %s: %s" % (name, self.api.delete("/api/v1/nodes/" + name))
        labels = {"kubernetes.io/hostname": name} if self.rnd.random() < 0.8 else {}
        o = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
        return "node %s labels %s: %s" % (name, labels, self.api.create("/api/v1/nodes", o))

    def report(self):
        path = "/api/v1/namespaces/%s/configmaps" % LOOP_NS
        kind = self.rnd.choice(["fine", "fine", "missing", "negative", "nan", "future", "stale",
                                "huge"])
        if kind == "missing":
            return "report of %s removed: %s" % (REPORT_NODE, self.api.delete(path + "/" + REPORT_NODE))
        now = int(time.time())
        data = {"free": str(self.rnd.choice([1 << 20, 1 << 30, 1 << 40])), "time": str(now),
                "root": "/var/lib/flexvol/loop"}
        if kind == "negative":
            data["free"] = "-5"
        elif kind == "nan":
            data["free"] = "lots"
        elif kind == "future":
            data["time"] = str(now + 86400 * 365)
        elif kind == "stale":
            data["time"] = str(now - 3600)
        elif kind == "huge":
            data["free"] = "9" * 40
        o = {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": REPORT_NODE, "namespace": LOOP_NS}, "data": data}
        st = self.api.create(path, o)
        if st == 409:
            cur = self.api.get(path + "/" + REPORT_NODE) or {}
            o["metadata"]["resourceVersion"] = cur.get("metadata", {}).get("resourceVersion", "")
            st = self.api.call("PUT", path + "/" + REPORT_NODE, o)[0]
        return "report of %s %s: %s" % (REPORT_NODE, kind, st)


# --- the invariants --------------------------------------------------------------------------

def violations(world, api, share, loop_root):
    """What breaks an invariant now (empty: all hold)."""
    out = []
    pvs = api.items("/api/v1/persistentvolumes")
    events = api.items("/api/v1/events")
    by_claim = {}
    for pv in pvs:
        ref = (pv.get("spec") or {}).get("claimRef") or {}
        by_claim.setdefault(ref.get("uid"), []).append(pv["metadata"]["name"])
    said = {e.get("involvedObject", {}).get("uid") for e in events
            if e.get("reason") in ("ProvisioningFailed", "ProvisioningSucceeded")}
    for c in world.live_claims():
        m, uid = c["metadata"], c["metadata"]["uid"]
        ours = (m.get("annotations") or {}).get(ANN_SP) in (NFS, LOOP)
        mine = by_claim.get(uid, [])
        if ours and not mine and uid not in said:
            out.append("claim %s/%s handed over to %s: no PV and no event" % (
                m["namespace"], m["name"], m["annotations"][ANN_SP]))
    for uid, names in by_claim.items():
        w = world.claims.get(uid)
        if uid and len(names) > 1:
            out.append("claim %s has %d PVs: %s" % (uid, len(names), names))
        if not w:
            continue
        cls = CLASSES.get(w["class"])
        if cls and not cls[1]:
            out.append("claim %s/%s of the invalid class %s got a PV: %s" % (
                w["ns"], w["name"], w["class"], names))
        if cls and cls[0] == LOOP and w["nodes"] == {GHOST_NODE}:
            out.append("claim %s/%s, only ever on the node that does not exist, got a PV: %s" % (
                w["ns"], w["name"], names))
    sub = {((pv["spec"].get("flexVolume") or {}).get("options") or {}).get("subPath") for pv in pvs}
    for d in sorted(os.listdir(share)):
        if d.startswith(".flexvol-owner-") or d.startswith("archived-"):
            continue
        if d not in sub:
            out.append("directory %s on the share: no PV names it" % d)
    names = {pv["metadata"]["name"] for pv in pvs}
    for f in sorted(os.listdir(loop_root)):
        if f.endswith(".img") and f[:-4] not in names:
            out.append("image %s in %s's loop root: no PV %s" % (f, AGENT_NODE, f[:-4]))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--bin", help="the Kubernetes binaries (default: tests/kube/build --print)")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--long", action="store_true", help="the long mode (outside CI)")
    ap.add_argument("--steps", type=int)
    ap.add_argument("--seconds", type=int)
    ap.add_argument("--settle", type=int, help="seconds to wait for the invariants at the end")
    ap.add_argument("--fake", action="store_true", help="fakeapi.py instead of the real server")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(1 << 32)
    steps = a.steps or (1500 if a.long else 120)
    seconds = a.seconds or (900 if a.long else 60)
    settle = a.settle or (180 if a.long else 60)
    log("seed %d (replay: --seed %d), at most %d steps in %d s, then up to %d s to settle" % (
        seed, seed, steps, seconds, settle))
    rnd = random.Random(seed)
    prov_bin = os.path.abspath(os.path.join(a.build, "flexvol-provisioner"))
    tmp = tempfile.mkdtemp(prefix="fvprop-")
    share, loop_root = os.path.join(tmp, "share"), os.path.join(tmp, "loop-" + AGENT_NODE)
    os.mkdir(share)
    os.mkdir(loop_root)
    server, procs, failed, passed = None, [], 0, 0
    try:
        if a.fake:
            server = FakeApiServer(tmp)
        else:
            bindir = a.bin or subprocess.run([os.path.join(HERE, "build"), "--print"],
                                             capture_output=True, text=True).stdout.strip()
            if not os.path.exists(os.path.join(os.path.dirname(bindir), "done")):
                log("no Kubernetes binaries in %s: run tests/kube/build first" % bindir)
                print("property: 0 passed, 1 failed")
                return 1
            t0 = time.monotonic()
            server = RealApiServer(bindir, tmp)
            try:
                server.up()
            except (RuntimeError, TimeoutError) as e:
                log("the API server did not come up: %s\n%s" % (e, server.logs()))
                failed = 1
                print("property: 0 passed, 1 failed")
                return 1
            log("etcd, kube-apiserver, kube-controller-manager up on %s in %.1f s" % (
                server.url, time.monotonic() - t0))
        api = server.api
        for ns in NAMESPACES + [LOOP_NS]:
            api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                              "metadata": {"name": ns}})
        api.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": AGENT_NODE, "labels": {"kubernetes.io/hostname": AGENT_NODE}}})
        tok = os.path.join(tmp, "token")
        with open(tok, "w") as f:
            f.write(TOKEN)
        conn = ["--server", server.url, "--token-file", tok, "--certificate-authority", server.cert]
        ctl = Proc("provisioner", [prov_bin] + conn + [
            "--root", share, "--resync", "5", "--retry-base", "0.5", "--retry-max", "3",
            "--fs-timeout", "30", "--http-endpoint", "", "--leader-elect=false"], tmp)
        agent = Proc("agent", [prov_bin] + conn + [
            "--node-agent", "--node", AGENT_NODE, "--loop-root", loop_root, "--interval", "1"], tmp)
        procs = [ctl, agent]
        for p in procs:
            p.start()
        # the fake's PV controller reads binary suffixes only
        world = World(api, rnd, [z for z in SIZES if not a.fake or z[-2:] in ("1", "Mi", "Gi", "Ti")])
        actions = [(world.class_create, 8), (world.class_delete, 2), (world.claim_create, 14),
                   (world.claim_schedule, 4), (world.claim_change, 4), (world.claim_delete, 7),
                   (world.node_toggle, 2), (world.report, 3), ("kill", 2), ("pause", 4)]
        fns = [f for f, w in actions for _ in range(w)]
        end = time.monotonic() + seconds
        for i in range(steps):
            if time.monotonic() >= end:
                log("time is up after %d steps" % i)
                break
            for p in procs:
                p.check()
            server.alive("etcd", "kube-apiserver", "kube-controller-manager")
            f = rnd.choice(fns)
            if f == "kill":
                p = rnd.choice(procs)
                if p.p is None:
                    p.start()
                p.kill9()
                # back at once or after a while (the world moves on meanwhile)
                if rnd.random() < 0.5:
                    p.start()
                what = "kill -9 %s%s" % (p.name, ", restarted" if p.p else "")
            elif f == "pause":
                t = rnd.choice([0.1, 0.5, 1.0, 2.0])
                time.sleep(t)
                what = "pause %.1f s" % t
            else:
                what = f()
            log("%4d %s" % (i, what))
            for p in procs:
                if p.p is None and rnd.random() < 0.3:
                    p.start()
                    log("     %s restarted" % p.name)
            time.sleep(rnd.random() * 0.2)
        for p in procs:
            if p.p is None:
                p.start()
        log("steps done; waiting up to %d s for the invariants" % settle)
        t0 = time.monotonic()
        now = violations(world, api, share, loop_root)
        while now and time.monotonic() - t0 < settle:
            time.sleep(2)
            for p in procs:
                p.check()
            now = violations(world, api, share, loop_root)
        log("settled in %.1f s" % (time.monotonic() - t0) if not now else
            "not settled after %d s" % settle)
        for p in procs:
            p.check()
        exits = [u for p in procs for u in p.unexpected]
        pvs = api.items("/api/v1/persistentvolumes")
        log("%d claims made, %d alive, %d PVs, %d directories, %d images, %d starts" % (
            len(world.claims), len(world.live_claims()), len(pvs), len(os.listdir(share)),
            len([f for f in os.listdir(loop_root) if f.endswith(".img")]),
            sum(p.n for p in procs)))
        server.alive("etcd", "kube-apiserver", "kube-controller-manager")
        if not pvs:
            now.append("not one PV was made: the run proved nothing (is the binder handing over?)")
        for name, bad in (("no exit but those the test caused", exits),
                          ("claims end with one PV or an event; no PV when refused; "
                           "nothing without an owner", now)):
            if bad:
                failed += 1
                print("FAIL " + name)
                for b in bad:
                    print("  " + b.replace("\n", "\n  | "))
            else:
                passed += 1
                print("ok   " + name)
        if failed:
            log("replay: python3 tests/kube/property.py --build %s --seed %d%s; logs kept in %s" % (
                a.build, seed, " --long" if a.long else "", tmp))
    except RuntimeError as e:  # a component of the API server exited
        failed += 1
        print("FAIL the API server's components keep running: %s" % e)
    finally:
        for p in procs:
            p.stop()
        if server:
            server.close()
        if not failed:
            shutil.rmtree(tmp, ignore_errors=True)
    print("property: %d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
