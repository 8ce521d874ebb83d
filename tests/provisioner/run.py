#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Integration test of flexvol-provisioner against a fake API server (fakeapi.py).

    python3 tests/provisioner/run.py --build build [-k NAME]

Every case starts a fresh fake API server, a fresh --root directory (standing
in for the share that kubelet mounts into the provisioner's pod) and the real
build/flexvol-provisioner, and checks the API objects, the events and the
directories it leaves.  Prints "N passed, N failed" last.
"""

import argparse
import json
import re
import urllib.error
import urllib.request
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import traceback
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fakeapi import FakeAPI  # noqa: E402

PROV = "flexvol/nfs"
PV_FINALIZER = "external-provisioner.volume.kubernetes.io/finalizer"
OWNER_PREFIX = ".flexvol-owner-"
CASES = []
CHROOT = False
EMULATOR = None  # qemu-user for a cross-built binary (copied into the chroot)


def case(fn):
    CASES.append(fn)
    return fn


class Fail(Exception):
    pass


class Skip(Exception):
    """A case that cannot run here (what it needs is said): counted apart, never passed."""


def check(cond, what):
    if not cond:
        raise Fail(what)


def wait_for(fn, what, timeout=15.0):
    t0 = time.time()
    while time.time() - t0 < timeout:
        v = fn()
        if v:
            return v
        time.sleep(0.05)
    raise Fail("timed out waiting for: " + (what() if callable(what) else what))


class Env:
    def __init__(self, build, https=False, token=None, resync=5):
        self.build = build
        self.tmp = tempfile.mkdtemp(prefix="fvprov-")
        self.root = os.path.join(self.tmp, "share")
        os.mkdir(self.root)
        self.procs = []
        self.logs = []
        self.cleanups = []  # called first at close(): what a case started besides the provisioner
        self.resync = resync
        cert = key = None
        if https:
            cert, key = os.path.join(self.tmp, "cert.pem"), os.path.join(self.tmp, "key.pem")
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                            "-keyout", key, "-out", cert], check=True, capture_output=True)
            self.ca = cert
        self.api = FakeAPI(cert, key, token)
        self.st = self.api.store

    def start(self, *extra, server=None):
        log = os.path.join(self.tmp, "prov-%d.log" % len(self.procs))
        # a short backoff (the default is 15 s .. 1000 s, as the provisioner library's)
        args = [os.path.join(self.build, "flexvol-provisioner"), "--server", server or self.api.url,
                "--root", self.root, "--resync", str(self.resync),
                "--retry-base", "0.5", "--retry-max", "2",
                "--http-endpoint", "127.0.0.1:0"] + list(extra)
        if CHROOT:
            # alone in an empty root: the binary, the share, the CA and token files; no
            # libc, no /etc, no /proc (the static binary for the distroless image)
            if not os.path.exists(os.path.join(self.tmp, "flexvol-provisioner")):
                # once: a second replica runs the same file (it is busy while the first runs)
                shutil.copy(args[0], os.path.join(self.tmp, "flexvol-provisioner"))
            # /dev/null, as every container runtime provides: a storage call's child
            # (src/exec.c) puts its stdin there
            dev = os.path.join(self.tmp, "dev")
            if not os.path.exists(os.path.join(dev, "null")):
                os.makedirs(dev, exist_ok=True)
                os.mknod(os.path.join(dev, "null"), 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            emu = []
            if EMULATOR and not os.path.exists(os.path.join(self.tmp, os.path.basename(EMULATOR))):
                shutil.copy(EMULATOR, os.path.join(self.tmp, os.path.basename(EMULATOR)))
                emu = ["/" + os.path.basename(EMULATOR)]
            args = ["chroot", self.tmp] + emu + ["/flexvol-provisioner"] + [
                "/" + os.path.relpath(a, self.tmp) if a.startswith(self.tmp + "/") else a
                for a in args[1:]]
        p = subprocess.Popen(args, stdout=open(log, "w"), stderr=subprocess.STDOUT)
        self.procs.append(p)
        self.logs.append(log)
        return p

    def log(self, i=-1):
        with open(self.logs[i]) as f:
            return f.read()

    def all_logs(self):
        return "".join(open(l).read() for l in self.logs)

    def kill(self, p, sig=signal.SIGKILL):
        if p.poll() is None:
            p.send_signal(sig)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    def close(self):
        for fn in self.cleanups:
            fn()
        for p in self.procs:
            self.kill(p, signal.SIGTERM)
        self.api.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # --- objects ---------------------------------------------------------------------------
    def sc(self, name="nfs", params=None, reclaim=None, provisioner=PROV):
        p = {"server": "nfs.example.com", "share": "/export/k8s"}
        if params is not None:
            p = params
        o = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
             "metadata": {"name": name}, "provisioner": provisioner, "parameters": p}
        if reclaim:
            o["reclaimPolicy"] = reclaim
        return self.st.put("storageclasses", o)

    def pvc(self, name, ns="default", sc="nfs", size="1Gi", labels=None, annotations=None,
            modes=("ReadWriteMany",), provisioner=None, beta=False, spec=None):
        """A claim as a user makes it; the fake controller-manager hands it to its class's
        provisioner.  @provisioner: the claim carries that annotation from the start (an
        older controller-manager's beta key with @beta)."""
        ann = dict(annotations or {})
        if provisioner:
            ann["volume.beta.kubernetes.io/storage-provisioner" if beta else
                "volume.kubernetes.io/storage-provisioner"] = provisioner
        o = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": name, "namespace": ns, "uid": str(uuid.uuid4()),
                          "labels": labels or {}, "annotations": ann},
             "spec": {"accessModes": list(modes), "storageClassName": sc,
                      "resources": {"requests": {"storage": size}}, "volumeMode": "Filesystem"},
             "status": {"phase": "Pending"}}
        o["spec"].update(spec or {})
        return self.st.put("persistentvolumeclaims", o)

    def pv_of(self, claim):
        return self.st.get("persistentvolumes", "pvc-" + claim["metadata"]["uid"])

    def events(self, claim=None, reason=None):
        return [e for e in self.st.items("events")
                if (claim is None or e["involvedObject"]["uid"] == claim["metadata"]["uid"]) and
                (reason is None or e["reason"] == reason)]

    def tree(self):
        """Everything below the share but the owner records."""
        out = []
        for d, dirs, files in os.walk(self.root):
            for n in dirs + files:
                if not n.startswith(OWNER_PREFIX):
                    out.append(os.path.relpath(os.path.join(d, n), self.root))
        return sorted(out)

    def owner_records(self):
        """{relative path of the record: its text}"""
        out = {}
        for d, dirs, files in os.walk(self.root):
            for n in files:
                if n.startswith(OWNER_PREFIX):
                    with open(os.path.join(d, n)) as f:
                        out[os.path.relpath(os.path.join(d, n), self.root)] = f.read()
        return out

    def owner_of(self, rel):
        """The claim uid the owner record of directory @rel names, or None."""
        name = os.path.basename(rel)
        for path, text in self.owner_records().items():
            if os.path.dirname(path) == os.path.dirname(rel):
                kv = dict(l.split(" ", 1) for l in text.splitlines() if " " in l)
                if kv.get("name") == name:
                    return kv.get("claim")
        return None

    def claim(self, name, ns="default"):
        return self.st.get("persistentvolumeclaims", name, ns)

    def bound(self, claim):
        pv = self.pv_of(claim)
        c = self.st.get("persistentvolumeclaims", claim["metadata"]["name"], claim["metadata"]["namespace"])
        return pv and pv["status"]["phase"] == "Bound" and c and c["status"]["phase"] == "Bound"


def dirname_of(claim):
    m = claim["metadata"]
    return "%s-%s-pvc-%s" % (m["namespace"], m["name"], m["uid"])


# --- cases -----------------------------------------------------------------------------------

@case
def provision_basic(e):
    """one claim: one directory (default pattern, mode 0777), one PV with every field, bound, event"""
    e.sc(params={"server": "nfs.example.com", "share": "/export/k8s", "nfsVersion": "4.1",
                 "mountOptions": "hard,timeo=600"})
    e.start()
    c = e.pvc("data", ns="team-a", size="5Gi", modes=("ReadWriteMany", "ReadOnlyMany"))
    wait_for(lambda: e.bound(c), "claim bound")
    pv = e.pv_of(c)
    d = dirname_of(c)
    check(e.tree() == [d], "one directory: %s" % e.tree())
    check(e.owner_of(d) == c["metadata"]["uid"], "owner record names the claim: %s" % e.owner_records())
    check(PV_FINALIZER in (pv["metadata"].get("finalizers") or []), "deletion-protection finalizer on the PV")
    check(pv["metadata"]["annotations"].get("flexvol/on-delete") == "archive", "onDelete recorded")
    st = os.stat(os.path.join(e.root, d))
    check(stat.S_IMODE(st.st_mode) == 0o777, "mode 0777: %o" % st.st_mode)
    s = pv["spec"]
    check(pv["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"] == PROV, "provisioned-by")
    check(s["capacity"] == {"storage": "5Gi"}, "capacity %s" % s["capacity"])
    check(s["accessModes"] == ["ReadWriteMany", "ReadOnlyMany"], "access modes")
    check(s["persistentVolumeReclaimPolicy"] == "Delete", "reclaim policy")
    check(s["storageClassName"] == "nfs", "storageClassName")
    check(s["claimRef"]["uid"] == c["metadata"]["uid"] and s["claimRef"]["name"] == "data" and
          s["claimRef"]["namespace"] == "team-a", "claimRef %s" % s["claimRef"])
    check(s["flexVolume"] == {"driver": PROV, "options": {
        "server": "nfs.example.com", "share": "/export/k8s", "subPath": d, "nfsVersion": "4.1",
        "mountOptions": "hard,timeo=600"}}, "flexVolume %s" % s["flexVolume"])
    wait_for(lambda: "flexvol/provisioning" not in (e.st.get("persistentvolumeclaims", "data", "team-a")
                                                    ["metadata"].get("finalizers") or []),
             "the provisioning finalizer removed once the PV exists")
    ev = wait_for(lambda: e.events(c, "ProvisioningSucceeded"), "ProvisioningSucceeded event")
    check(len(ev) == 1 and ev[0]["type"] == "Normal" and ev[0]["involvedObject"]["kind"] ==
          "PersistentVolumeClaim" and ev[0]["metadata"]["namespace"] == "team-a", "event %s" % ev)
    check("provision" in e.log().lower() or "directory" in e.log(), "a log line per action")


@case
def pattern_labels_mode_owner(e):
    """pathPattern with claim labels/annotations and nested directories; mode, uid, gid; readOnly"""
    e.sc(params={"server": "10.0.0.5", "share": "/srv", "readOnly": "true",
                 "pathPattern": "${.PVC.namespace}/${.PVC.labels.app}/${.PVC.annotations.tier}-${pvc}",
                 "mode": "2770", "uid": "1234", "gid": "5678", "onDelete": "retain"})
    e.start()
    c = e.pvc("db", ns="shop", labels={"app": "pg"}, annotations={"tier": "gold"})
    wait_for(lambda: e.bound(c), "claim bound")
    check(e.tree() == ["shop", "shop/pg", "shop/pg/gold-db"], "tree %s" % e.tree())
    st = os.stat(os.path.join(e.root, "shop/pg/gold-db"))
    check(stat.S_IMODE(st.st_mode) == 0o2770 and st.st_uid == 1234 and st.st_gid == 5678,
          "mode/owner %o %d %d" % (st.st_mode, st.st_uid, st.st_gid))
    fx = e.pv_of(c)["spec"]["flexVolume"]
    check(fx.get("readOnly") is True and fx["options"]["subPath"] == "shop/pg/gold-db", "pv %s" % fx)
    check(e.pv_of(c)["metadata"]["annotations"]["flexvol/on-delete"] == "retain", "on-delete recorded")


@case
def bad_parameters_are_events(e):
    """unknown parameter, bad values, options the nfs driver refuses, a missing label: a
    ProvisioningFailed event each, no PV, no directory, no crash; a fixed class then works"""
    bad = [
        ("unknown", {"server": "s", "share": "/x", "colour": "blue"}, "unknown parameter 'colour'"),
        ("badmode", {"server": "s", "share": "/x", "mode": "999"}, "mode"),
        ("badondelete", {"server": "s", "share": "/x", "onDelete": "shred"}, "onDelete"),
        ("badserver", {"server": "a b", "share": "/x"}, "option 'server'"),
        ("badshare", {"server": "s", "share": "/x/../etc"}, "option 'share'"),
        ("badmo", {"server": "s", "share": "/x", "mountOptions": "suid"}, "mountOptions"),
        ("badvers", {"server": "s", "share": "/x", "nfsVersion": "5"}, "nfsVersion"),
        ("dotdot", {"server": "s", "share": "/x", "pathPattern": "../${pvc}"}, "'..'"),
        ("abs", {"server": "s", "share": "/x", "pathPattern": "/etc/${pvc}"}, "relative"),
        ("nolabel", {"server": "s", "share": "/x", "pathPattern": "${namespace}/${.PVC.labels.missing}"}, "no label"),
        ("unknownvar", {"server": "s", "share": "/x", "pathPattern": "${nope}"}, "unknown variable"),
        ("noserver", {"share": "/x"}, "'server' is required"),
    ]
    for name, params, _ in bad:
        e.sc(name=name, params=params)
    e.start()
    claims = [(e.pvc("c-" + name, sc=name), why) for name, _, why in bad]
    for c, why in claims:
        ev = wait_for(lambda c=c: e.events(c, "ProvisioningFailed"), "ProvisioningFailed for " + why)
        check(why in ev[0]["message"] and ev[0]["type"] == "Warning",
              "message names the problem (%s): %s" % (why, ev[0]["message"]))
    check(not e.st.items("persistentvolumes"), "no PV")
    check(e.tree() == [], "no directory: %s" % e.tree())
    check(e.procs[0].poll() is None, "still running")
    # each failing claim is retried after its backoff (no re-list), and the same failure is
    # not repeated as an event at every retry (events are deduplicated)
    n = len(e.events(reason="ProvisioningFailed"))
    # (the class comes from the class watch: the retries show in the log, one line each)
    wait_for(lambda: e.all_logs().count('object="default/c-unknown" kind="PersistentVolumeClaim" '
                                        'type="Warning" reason="ProvisioningFailed"') >= 3,
             "retried after a backoff", 20)
    check(e.st.count("GET", "/api/v1/persistentvolumeclaims?limit") == 1, "listed once")
    check(len(e.events(reason="ProvisioningFailed")) == n, "no repeated events")
    # fix one class: the next retry provisions its claim
    e.sc(name="unknown", params={"server": "s", "share": "/x"})
    wait_for(lambda: e.bound(claims[0][0]), "fixed class provisions", 20)


@case
def foreign_claims_ignored(e):
    """claims of another provisioner's class, or of our class handed to another provisioner:
    untouched; the beta annotation alone (an older controller-manager) is enough"""
    e.sc(name="other", provisioner="example.com/other")
    e.sc(name="nfs")
    e.start()
    a = e.pvc("a", sc="other")
    b = e.pvc("b", sc="nfs", provisioner="example.com/other")
    c = e.pvc("c", sc="nfs", provisioner=PROV, beta=True)  # the older annotation: ours
    wait_for(lambda: e.bound(c), "beta-annotated claim bound")
    time.sleep(1)
    check(e.pv_of(a) is None and e.pv_of(b) is None, "no PV for foreign claims")
    check(not e.events(a) and not e.events(b), "no events for foreign claims")
    check(e.tree() == [dirname_of(c)], "one directory")


@case
def wait_for_first_consumer(e):
    """volumeBindingMode WaitForFirstConsumer: nothing until the scheduler's selected-node"""
    o = e.sc()
    o["volumeBindingMode"] = "WaitForFirstConsumer"
    e.st.put("storageclasses", o)
    e.start()
    c = e.pvc("late")
    time.sleep(1.5)
    check(e.pv_of(c) is None and e.tree() == [], "nothing before a node is selected")
    c = e.st.get("persistentvolumeclaims", "late", "default")
    c["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] = "node-1"
    e.st.put("persistentvolumeclaims", c)
    wait_for(lambda: e.bound(c), "bound after selected-node")


@case
def watch_expired_410(e):
    """a watch answered with ERROR 410 Expired (compaction between list and watch, and in the
    middle of a stream) and an expired continue token: re-list, nothing missed"""
    e.sc()
    e.st.expire_next_watches(2)
    e.start()
    wait_for(lambda: "410" in e.log() or "xpired" in e.log(), "the provisioner saw 410")
    c1 = e.pvc("one")
    wait_for(lambda: e.bound(c1), "claim bound after re-list")
    lists = e.st.count("GET", "/api/v1/persistentvolumeclaims?limit")
    check(lists >= 2, "re-listed (%d lists)" % lists)
    # in the middle of an open watch stream
    wait_for(lambda: e.st.count("WATCH", "/api/v1/persistentvolumeclaims") >= 2, "watching again")
    e.st.compact()
    e.st.inject_watch_error()
    c2 = e.pvc("two")
    wait_for(lambda: e.bound(c2), "claim bound after mid-stream 410")
    check(e.st.count("GET", "/api/v1/persistentvolumeclaims?limit") > lists, "re-listed again")
    check(len(e.st.items("persistentvolumes")) == 2 and len(e.tree()) == 2, "one PV and dir each")


@case
def paged_list_and_expired_continue(e):
    """1200 objects: the list is paged (limit/continue); an expired continue token (410) restarts it"""
    e.sc(name="other", provisioner="example.com/other")
    for i in range(1200):
        e.pvc("f%04d" % i, sc="other", provisioner="example.com/other")
    e.sc()
    c = e.pvc("zz-ours")
    e.st.expire_next_continue = True  # compaction between the first and second page
    e.start()
    wait_for(lambda: e.bound(c), "claim on the third page bound", 30)
    check(e.st.count("GET", "/api/v1/persistentvolumeclaims?limit=500&continue=", 410) == 1,
          "one expired continue")
    check(e.st.count("GET", "/api/v1/persistentvolumeclaims?limit=500&continue=", 200) >= 2,
          "paged")
    check("continue parameter is too old" in e.log(), "410 logged")


@case
def watch_stream_framing(e):
    """watch events cut into 7-byte chunks, and many events in one chunk: all parsed"""
    e.sc()
    e.start()
    wait_for(lambda: e.st.count("WATCH", "/api/v1/persistentvolumeclaims") >= 1, "watching")
    e.st.split_events = True
    a = e.pvc("split", labels={"k": "v" * 200}, annotations={"note": "a \\\" quoted, {braced} \\u00e9"})
    wait_for(lambda: e.bound(a), "claim seen through split chunks")
    e.st.split_events = False
    e.st.coalesce_events = True
    with e.st.lock:  # make all ten at once, so the watch sends them together
        many = [e.pvc("many%d" % i) for i in range(10)]
    for c in many:
        # on a timeout: which claim, as the API has it, and its PV, as the provisioner's log
        # is cut to its last lines
        wait_for(lambda c=c: e.bound(c), lambda c=c: "claim %s seen in a coalesced chunk "
                 "(claim now: %s; its PV: %s; log lines: %s)" % (
                     c["metadata"]["name"], e.claim(c["metadata"]["name"]), e.pv_of(c),
                     [l for l in e.log().splitlines() if c["metadata"]["name"] in l]))
    check(e.st.count("WATCH", "/api/v1/persistentvolumeclaims") == 1, "one watch, never re-listed")


@case
def dropped_connection(e):
    """the watch connections drop without a last chunk: re-list, then claims made meanwhile work"""
    e.sc()
    e.start()
    wait_for(lambda: e.st.count("WATCH", "/api/v1/persistentvolumeclaims") >= 1, "watching")
    e.st.drop_watches()
    c = e.pvc("after-drop")
    wait_for(lambda: e.bound(c), "claim bound after the drop")
    wait_for(lambda: e.st.count("WATCH", "/api/v1/persistentvolumeclaims") >= 2, "watch restarted")
    check("outstanding read data" in e.log() or "watch:" in e.log(), "the drop is logged")


@case
def create_conflict_409(e):
    """the PV appears between the provisioner's GET and POST (another replica): 409 is success,
    one PV, one directory, no failure event"""
    e.sc()
    e.st.race_next_pv_create = True
    e.start()
    c = e.pvc("raced")
    wait_for(lambda: e.st.count("POST", "/api/v1/persistentvolumes", 409) >= 1, "a 409")
    wait_for(lambda: e.bound(c), "claim bound")
    check(e.pv_of(c)["metadata"]["annotations"].get("test/created-by") == "other-replica", "the other's PV")
    check(len(e.st.items("persistentvolumes")) == 1 and e.tree() == [dirname_of(c)], "one PV, one dir")
    check(not e.events(c, "ProvisioningFailed"), "no failure event")
    wait_for(lambda: "exists already" in e.log(), "409 logged")


@case
def two_replicas(e):
    """two provisioners on one share and one API: every claim gets exactly one PV and one dir"""
    e.sc()
    e.start()
    e.start()
    claims = [e.pvc("r%02d" % i) for i in range(12)]
    for c in claims:
        wait_for(lambda c=c: e.bound(c), "claim bound")
    time.sleep(1)
    check(len(e.st.items("persistentvolumes")) == 12, "12 PVs")
    check(e.tree() == sorted(dirname_of(c) for c in claims), "12 dirs")
    check(not e.events(reason="ProvisioningFailed"), "no failure events")


@case
def restart_between_mkdir_and_pv_create(e):
    """kill -9 while the PV create is on the wire (after mkdir), restart: one dir, one PV"""
    e.sc(params={"server": "s", "share": "/x", "mode": "0750"})
    e.st.stall_pv_create = True
    p = e.start()
    c = e.pvc("crash")
    wait_for(lambda: e.st.stalled.is_set(), "PV create in flight")
    check(e.tree() == [dirname_of(c)], "directory made before the PV")
    e.kill(p)
    check(e.pv_of(c) is None, "no PV yet")
    e.st.stall_pv_create = False
    e.st.release.set()
    e.start()
    wait_for(lambda: e.bound(c), "claim bound after restart")
    check(e.tree() == [dirname_of(c)], "still one directory")
    check(len(e.st.items("persistentvolumes")) == 1, "one PV")
    check("made before for this claim" in e.log(), "directory kept: made before for this claim")
    check(stat.S_IMODE(os.stat(os.path.join(e.root, dirname_of(c))).st_mode) == 0o750, "mode")


@case
def claim_deleted_while_down(e):
    """kill -9 between mkdir and PV create, the claim deleted while the provisioner is down:
    the claim waits (finalizer) until the restarted provisioner removes the empty directory"""
    e.sc()
    e.st.stall_pv_create = True
    p = e.start()
    c = e.pvc("short-lived")
    wait_for(lambda: e.st.stalled.is_set(), "PV create in flight")
    e.kill(p)
    check(e.tree() == [dirname_of(c)], "directory made")
    check("flexvol/provisioning" in e.st.get("persistentvolumeclaims", "short-lived", "default")
          ["metadata"]["finalizers"], "finalizer on the claim before mkdir")
    e.st.api_delete("persistentvolumeclaims", "default", "short-lived")
    check(e.st.get("persistentvolumeclaims", "short-lived", "default") is not None, "claim held")
    e.st.stall_pv_create = False
    e.st.release.set()
    e.start()
    wait_for(lambda: e.st.get("persistentvolumeclaims", "short-lived", "default") is None,
             "claim gone after the restart")
    check(e.tree() == [], "no orphan directory: %s" % e.tree())
    check(not e.st.items("persistentvolumes"), "no PV")


@case
def finalizer_conflict(e):
    """a 409 Conflict on the claim's finalizer patch (someone changed it): retried with the newer
    claim"""
    e.sc()
    e.st.conflict_next_put = True
    e.start()
    c = e.pvc("busy")
    wait_for(lambda: e.st.count("PATCH", "/api/v1/namespaces/default/persistentvolumeclaims/busy", 409),
             "a 409 on the update")
    # someone else's change: a MODIFIED event with the newer claim
    cur = e.st.get("persistentvolumeclaims", "busy", "default")
    cur["metadata"]["labels"]["touched"] = "yes"
    e.st.put("persistentvolumeclaims", cur)
    wait_for(lambda: e.bound(c), "bound after the conflict")
    check(len(e.tree()) == 1 and len(e.st.items("persistentvolumes")) == 1, "one dir, one PV")


def delete_case(e, on_delete, reclaim=None):
    params = {"server": "s", "share": "/x"}
    if on_delete:
        params["onDelete"] = on_delete
    e.sc(params=params, reclaim=reclaim)
    e.start()
    c = e.pvc("gone")
    wait_for(lambda: e.bound(c), "claim bound")
    d = dirname_of(c)
    with open(os.path.join(e.root, d, "data.txt"), "w") as f:
        f.write("precious")
    os.mkdir(os.path.join(e.root, d, "sub"))
    os.symlink("/etc", os.path.join(e.root, d, "sub", "etc-link"))
    pv_uid = e.pv_of(c)["metadata"]["uid"]
    wait_for(lambda: not e.st.get("persistentvolumeclaims", "gone", "default")["metadata"].get("finalizers"),
             "no finalizer left on a bound claim")
    e.st.api_delete("persistentvolumeclaims", "default", "gone")
    check(e.st.get("persistentvolumeclaims", "gone", "default") is None, "claim deleted at once")
    return c, d, pv_uid


@case
def delete_archive(e):
    """claim deleted, default onDelete (archive): directory renamed archived-<name>, PV deleted"""
    c, d, _ = delete_case(e, None)
    wait_for(lambda: e.pv_of(c) is None, "PV deleted")
    check(e.tree() == ["archived-" + d, "archived-%s/data.txt" % d, "archived-%s/sub" % d,
                       "archived-%s/sub/etc-link" % d], "archived: %s" % e.tree())
    check(os.path.exists("/etc/passwd"), "symlink target untouched")


@case
def delete_delete(e):
    """onDelete=delete: the directory and everything in it removed (symlinks not followed)"""
    c, d, _ = delete_case(e, "delete")
    wait_for(lambda: e.pv_of(c) is None, "PV deleted")
    check(e.tree() == [], "removed: %s" % e.tree())
    check(os.path.exists("/etc/passwd"), "symlink target untouched")


@case
def delete_retain(e):
    """onDelete=retain: directory kept as it is, PV deleted"""
    c, d, _ = delete_case(e, "retain")
    wait_for(lambda: e.pv_of(c) is None, "PV deleted")
    check(e.tree() == [d, d + "/data.txt", d + "/sub", d + "/sub/etc-link"], "kept: %s" % e.tree())


@case
def reclaim_retain_left_alone(e):
    """reclaimPolicy Retain: a Released PV and its directory are left alone"""
    c, d, _ = delete_case(e, "delete", reclaim="Retain")
    wait_for(lambda: e.pv_of(c)["status"]["phase"] == "Released", "released")
    check(e.pv_of(c)["spec"]["persistentVolumeReclaimPolicy"] == "Retain", "Retain on the PV")
    time.sleep(2)
    check(e.pv_of(c) is not None and d in e.tree(), "PV and directory kept")


@case
def delete_on_restart(e):
    """a PV released while the provisioner was down is reclaimed at the next start (list)"""
    e.sc(params={"server": "s", "share": "/x", "onDelete": "delete"})
    p = e.start()
    c = e.pvc("later")
    wait_for(lambda: e.bound(c), "claim bound")
    e.kill(p)
    e.st.api_delete("persistentvolumeclaims", "default", "later")
    e.start()
    wait_for(lambda: e.pv_of(c) is None, "PV deleted after restart")
    check(e.tree() == [], "dir removed")


@case
def confined_no_symlinks(e):
    """a symlink where the claim's directory (or a parent) would go: ProvisioningFailed,
    nothing created outside the root; a released PV whose dir is a symlink: the link only"""
    outside = os.path.join(e.tmp, "outside")
    os.mkdir(outside)
    e.sc(name="flat", params={"server": "s", "share": "/x", "pathPattern": "${pvc}"})
    e.sc(name="nested", params={"server": "s", "share": "/x", "pathPattern": "nest/${pvc}"})
    os.symlink(outside, os.path.join(e.root, "evil"))
    os.symlink(outside, os.path.join(e.root, "nest"))
    e.start()
    a = e.pvc("evil", sc="flat")
    b = e.pvc("inner", sc="nested")
    for c in (a, b):
        ev = wait_for(lambda c=c: e.events(c, "ProvisioningFailed"), "ProvisioningFailed")
        check("cannot create directory" in ev[0]["message"], ev[0]["message"])
    check(os.listdir(outside) == [], "nothing outside the root")
    check(not e.st.items("persistentvolumes"), "no PV")


def https_with_token(e, tok):
    """@e again, its fake API on HTTPS wanting bearer token @tok; the token file's path"""
    e.close()
    e.__init__(e.build, https=True, token=tok)
    tf = os.path.join(e.tmp, "token")
    with open(tf, "w") as f:
        f.write(tok + "\n")
    return tf


@case
def https_token_and_ca(e):
    """HTTPS with --certificate-authority and --token-file; a wrong CA never talks"""
    tok = "s3cr3t-token-" + uuid.uuid4().hex
    tf = https_with_token(e, tok)
    e.sc()
    other_ca = os.path.join(e.tmp, "other.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-keyout", os.path.join(e.tmp, "k2"), "-out",
                    other_ca], check=True, capture_output=True)
    bad = e.start("--token-file", tf, "--certificate-authority", other_ca)
    wait_for(lambda: "certificate" in e.log(), "TLS failure logged")
    check(not any(m == "GET" for m, _, _ in e.st.requests), "no request got through")
    e.kill(bad)
    e.start("--token-file", tf, "--certificate-authority", e.ca)
    c = e.pvc("tls")
    wait_for(lambda: e.bound(c), "claim bound over HTTPS")
    check(tok not in e.all_logs(), "the token is never logged")
    check(e.st.count("GET", "/", 401) == 0, "authorized")


@case
def token_reread_on_401(e):
    """the token rotates (kubelet rewrote the file, the server refuses the old one): the next
    request gets a 401, reads the file again and succeeds at once, not a minute later"""
    e.close()
    e.__init__(e.build, token="old-" + uuid.uuid4().hex)
    tf = os.path.join(e.tmp, "token")
    with open(tf, "w") as f:
        f.write(e.st.token + "\n")
    e.sc()
    e.start("--token-file", tf)
    a = e.pvc("before")
    wait_for(lambda: e.bound(a), "bound with the first token")
    new = "new-" + uuid.uuid4().hex
    with open(tf + ".tmp", "w") as f:
        f.write(new + "\n")
    os.rename(tf + ".tmp", tf)
    e.st.token = new
    b = e.pvc("after")
    wait_for(lambda: e.bound(b), "bound soon after the rotation", 15)
    check(e.st.count("GET", "/", 401) + e.st.count("POST", "/", 401) +
          e.st.count("PUT", "/", 401) + e.st.count("PATCH", "/", 401) >= 1, "a 401 was seen")
    check(new not in e.all_logs(), "the token is never logged")


@case
def throttled_429_retry_after(e):
    """429 Too Many Requests with Retry-After on the PV create: waited out as asked and
    retried; no ProvisioningFailed event, one PV"""
    e.sc()
    e.st.throttle("POST", "/api/v1/persistentvolumes", n=2, retry_after=1)
    e.start()
    c = e.pvc("busy-server")
    wait_for(lambda: e.bound(c), "bound after the 429s", 20)
    # the fake API binds the claim while it handles the create, and records the request after
    # its answer: wait for that record
    wait_for(lambda: e.st.times("POST", "/api/v1/persistentvolumes", 201), "the create recorded")
    t429 = e.st.times("POST", "/api/v1/persistentvolumes", 429)
    t201 = e.st.times("POST", "/api/v1/persistentvolumes", 201)
    check(len(t429) == 2 and len(t201) == 1, "two 429s, one create: %s %s" % (t429, t201))
    check(t429[1] - t429[0] >= 0.9 and t201[0] - t429[1] >= 0.9, "Retry-After: 1 honoured")
    check(not e.events(c, "ProvisioningFailed"), "no failure event")
    check(len(e.st.items("persistentvolumes")) == 1, "one PV")


@case
def watch_resumed_from_bookmarks(e):
    """watches that time out are resumed from their resourceVersion, kept recent by BOOKMARK
    events while other objects move the server's resourceVersion on and history is compacted:
    one list in all, no 410"""
    e.sc()
    e.start("--watch-timeout", "1")
    a = e.pvc("first")
    wait_for(lambda: e.bound(a), "bound")
    for i in range(5):
        # unrelated objects move the resourceVersion on; then the history is compacted
        e.sc(name="other-%d" % i, provisioner="example.com/other")
        time.sleep(0.3)
        e.st.compact()
        time.sleep(1.2)
    wait_for(lambda: e.st.count("WATCH", "/api/v1/persistentvolumeclaims") >= 5, "watches resumed")
    b = e.pvc("second")
    wait_for(lambda: e.bound(b), "bound through a resumed watch")
    check(e.st.bookmarks >= 2, "bookmarks sent")
    # a compaction that lands between a watch's end and its restart, before any bookmark
    # reached it, is a legitimate 410 (a real API server does the same): one such re-list
    # is allowed; a periodic re-list or one per watch end is not (seen once in ~10 runs)
    lists = e.st.count("GET", "/api/v1/persistentvolumeclaims?limit")
    raced = "410" in e.log() or "xpired" in e.log()
    check(lists == 1 or (raced and lists == 2), "listed once (twice after a 410): %d" % lists)
    check(e.st.count("GET", "/api/v1/persistentvolumes?limit") <= lists,
          "PVs listed %d times" % e.st.count("GET", "/api/v1/persistentvolumes?limit"))


def children(pid):
    out = []
    try:
        for t in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, t)) as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


@case
def delete_deadline_off_the_loop(e):
    """a reclaim that hangs (its child stopped, as on an NFS server that stopped answering) is
    killed at --fs-timeout, reported as VolumeFailedDelete on the PV and retried after its
    backoff; meanwhile another claim is provisioned (the work is off the watch loop)"""
    e.sc(params={"server": "s", "share": "/x", "onDelete": "delete"})
    p = e.start("--fs-timeout", "4")
    c = e.pvc("big")
    wait_for(lambda: e.bound(c), "bound")
    d = os.path.join(e.root, dirname_of(c))
    for i in range(200):
        os.mkdir(os.path.join(d, "d%d" % i))
        for j in range(400):
            open(os.path.join(d, "d%d" % i, "f%d" % j), "w").close()
    pv = e.pv_of(c)
    e.st.api_delete("persistentvolumeclaims", "default", "big")
    t0 = time.time()
    kid = None
    while kid is None and time.time() - t0 < 10:
        for k in children(p.pid):
            try:
                with open("/proc/%d/cmdline" % k, "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            # the child is this program exec'd again: only forked from the threaded
            # provisioner, it inherits the locks other threads held (one hung in json-c's
            # locale lock until its deadline)
            if b"--fs-call" in argv:
                kid = k
                os.kill(kid, signal.SIGSTOP)
    check(kid is not None, "the delete runs in an exec'd child process (--fs-call)")
    t1 = time.time()
    other = e.pvc("meanwhile")
    wait_for(lambda: e.bound(other), "another claim provisioned while the delete hangs", 3.5)
    check(time.time() - t1 < 3.9 and os.path.isdir(d) and e.pv_of(c) is not None,
          "before the deadline, with the delete still hanging")
    ev = wait_for(lambda: [x for x in e.st.items("events") if x["reason"] == "VolumeFailedDelete"
                           and x["involvedObject"]["name"] == pv["metadata"]["name"]],
                  "VolumeFailedDelete on the PV", 10)
    check("did not finish within 4 s" in ev[0]["message"] and ev[0]["type"] == "Warning" and
          ev[0]["involvedObject"]["kind"] == "PersistentVolume", "event %s" % ev[0])
    wait_for(lambda: e.pv_of(c) is None, "PV deleted on a retry", 30)
    check(e.tree() == [dirname_of(other)], "tree removed: %d entries" % len(e.tree()))
    # (a claim's cleanup may fork a short-lived child of its own meanwhile)
    wait_for(lambda: not children(p.pid), "no child left", 5)


def http_url(e, i):
    """the /metrics address provisioner @i logged"""
    m = wait_for(lambda: re.search(r"serving /metrics.* on (http://\S+)", e.log(i)), "HTTP endpoint")
    return m.group(1)


def http_get(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode(), r.headers.get("Content-Type")
    except urllib.error.HTTPError as x:
        return x.code, x.read().decode(), x.headers.get("Content-Type")


def metric(text, name):
    m = re.search(r"^%s (\S+)$" % re.escape(name), text, re.M)
    return float(m.group(1)) if m else None


@case
def leader_election_takeover(e):
    """two replicas with a Lease: only the holder works; kill -9 the leader, the other takes
    over within the lease duration and provisions; a clean stop releases the Lease"""
    e.sc()
    lease_args = ["--leader-election-lease-duration", "4", "--leader-election-renew-deadline", "3",
                  "--leader-election-retry-period", "1"]
    a = e.start("--leader-election-identity", "pod-a", *lease_args)
    lease = lambda: e.st.get("leases", "flexvol-provisioner", "default")
    wait_for(lambda: lease() and lease()["spec"]["holderIdentity"] == "pod-a", "pod-a holds the lease")
    b = e.start("--leader-election-identity", "pod-b", *lease_args)
    wait_for(lambda: "standing by" in e.log(1), "pod-b stands by")
    c1 = e.pvc("one")
    wait_for(lambda: e.bound(c1), "bound by the leader")
    time.sleep(1.5)
    check("ProvisioningSucceeded" in e.log(0) and "ProvisioningSucceeded" not in e.log(1),
          "only the leader worked")
    st, body, _ = http_get(http_url(e, 1) + "/metrics")
    check(st == 200 and metric(body, "flexvol_provisioner_leader") == 0, "standby: leader 0")
    st, _, _ = http_get(http_url(e, 1) + "/readyz")
    check(st == 200, "a standby is ready (readiness does not mean leadership)")
    renewed = lease()["spec"]["renewTime"]
    wait_for(lambda: lease()["spec"]["renewTime"] != renewed, "the leader renews")
    e.kill(a)
    t0 = time.time()
    c2 = e.pvc("two")
    wait_for(lambda: lease()["spec"]["holderIdentity"] == "pod-b", "pod-b takes the lease", 10)
    wait_for(lambda: e.bound(c2), "bound by the new leader", 10)
    took = time.time() - t0
    check(took < 4 + 1 * 2.2 + 3, "took over within the lease duration (+ a retry): %.1f s" % took)
    check(lease()["spec"]["leaseTransitions"] == 1, "one transition: %s" % lease()["spec"])
    # the PV create binds the claim at once; the event's log line follows it
    wait_for(lambda: "ProvisioningSucceeded" in e.log(1), "pod-b provisioned")
    st, body, _ = http_get(http_url(e, 1) + "/metrics")
    check(metric(body, "flexvol_provisioner_leader") == 1, "leader 1")
    e.kill(b, signal.SIGTERM)
    check(b.returncode == 0, "clean exit")
    check(lease()["spec"]["holderIdentity"] == "", "released: %s" % lease()["spec"])


@case
def metrics_and_probes(e):
    """/metrics in the Prometheus text format (provision and delete counts by result, duration
    histograms, queue depth), /healthz and /readyz; anything else 404, POST 405"""
    e.sc(name="bad", params={"server": "s", "share": "/x", "colour": "blue"})
    e.sc(params={"server": "s", "share": "/x", "onDelete": "delete"})
    e.start()
    url = http_url(e, 0)
    ok = e.pvc("ok")
    bad = e.pvc("bad", sc="bad")
    wait_for(lambda: e.bound(ok), "bound")
    wait_for(lambda: e.events(bad, "ProvisioningFailed"), "failure event")
    e.st.api_delete("persistentvolumeclaims", "default", "ok")
    wait_for(lambda: e.pv_of(ok) is None, "reclaimed")
    st, body, ctype = http_get(url + "/metrics")
    check(st == 200 and ctype.startswith("text/plain; version=0.0.4"), "content type %s" % ctype)
    nfs = 'backend="%s",class="nfs"' % PROV
    check(metric(body, 'flexvol_provisioner_provision_total{%s,result="success"}' % nfs) == 1, body)
    check(metric(body, 'flexvol_provisioner_provision_total{backend="%s",class="bad",'
                       'result="failure"}' % PROV) >= 1, body)
    # counted a moment after the PV delete returns (slower on a sanitizer build)
    wait_for(lambda: metric(http_get(url + "/metrics")[1],
                            'flexvol_provisioner_delete_total{%s,result="success"}' % nfs) == 1,
             "the delete counted")
    check(metric(body, "flexvol_provisioner_provision_duration_seconds_count{%s}" % nfs) >= 1, body)
    check(metric(body, 'flexvol_provisioner_provision_duration_seconds_bucket{%s,le="+Inf"}' % nfs) ==
          metric(body, "flexvol_provisioner_provision_duration_seconds_count{%s}" % nfs), "histogram")
    check(metric(body, "flexvol_provisioner_queue_depth") >= 1, "the failing claim waits: %s" %
          metric(body, "flexvol_provisioner_queue_depth"))
    check(metric(body, "flexvol_provisioner_leader") == 1, "leader")
    check("# TYPE flexvol_provisioner_provision_duration_seconds histogram" in body, "TYPE line")
    for line in body.splitlines():
        check(line.startswith("#") or
              re.match(r'^[a-z_]+(\{[a-z]+="[^"]*"(,[a-z]+="[^"]*")*\})? [0-9.e+-]+$', line),
              "exposition line: %r" % line)
    for path in ("/healthz", "/readyz"):
        st, body, _ = http_get(url + path)
        check(st == 200 and body == "ok\n", "%s: %d %r" % (path, st, body))
    check(http_get(url + "/nope")[0] == 404, "404")
    req = urllib.request.Request(url + "/metrics", data=b"x", method="POST")
    try:
        urllib.request.urlopen(req, timeout=5)
        check(False, "POST refused")
    except urllib.error.HTTPError as x:
        check(x.code == 405, "405: %d" % x.code)
    # a client that sends nothing holds the responder at most its deadline
    import socket
    host, port = url[len("http://"):].rsplit(":", 1)
    s = socket.create_connection((host, int(port)))
    t0 = time.time()
    check(http_get(url + "/healthz")[0] == 200, "answered after the silent client's deadline")
    check(time.time() - t0 < 4, "within the 2 s deadline")
    s.close()


@case
def static_smoke(e):
    """what a (cross-)built static binary can get wrong, alone in its chroot: HTTPS with the CA,
    the token (and its re-read on a 401), the Lease, the watch stream, the HTTP endpoint, the
    storage child.  Under qemu-user (--emulator) the claim gets a ProvisioningFailed event
    instead of a directory: with a binfmt_misc entry for the architecture the exec'd storage
    child runs and bookworm's qemu answers its openat2() with ENOSYS ("not implemented");
    without one the kernel cannot exec the child at all ("cannot start the create": the CI
    machine's binfmt_misc is not always mounted; both seen there)"""
    tok = "tok-" + uuid.uuid4().hex
    tf = https_with_token(e, tok)
    e.sc()
    e.start("--token-file", tf, "--certificate-authority", e.ca, "--leader-election-identity", "smoke")
    lease = lambda: e.st.get("leases", "flexvol-provisioner", "default")
    wait_for(lambda: lease() and lease()["spec"]["holderIdentity"] == "smoke", "the Lease", 30)
    url = http_url(e, 0)
    check(http_get(url + "/healthz")[0] == 200, "/healthz")
    st, body, _ = http_get(url + "/metrics")
    check(st == 200 and metric(body, "flexvol_provisioner_leader") == 1, "/metrics")

    def handled(c):
        return e.bound(c) or (EMULATOR and [x for x in e.events(c, "ProvisioningFailed")
                                            if "not implemented" in x["message"] or
                                            "cannot start the create" in x["message"]])
    a = e.pvc("smoke-a")
    wait_for(lambda: handled(a), "claim handled through the watch", 30)
    new = "tok2-" + uuid.uuid4().hex
    with open(tf, "w") as f:
        f.write(new + "\n")
    e.st.token = new
    b = e.pvc("smoke-b")
    wait_for(lambda: handled(b), "claim handled after the token rotated", 30)
    check(tok not in e.all_logs() and new not in e.all_logs(), "no token in the log")
    e.kill(e.procs[0], signal.SIGTERM)
    check(e.procs[0].returncode == 0, "clean exit")
    check(lease()["spec"]["holderIdentity"] == "", "Lease released")


@case
def plain_http_only_loopback(e):
    """http:// is refused for anything but a loopback host, parsed as a URL (failed before:
    a string prefix let http://127.0.0.1@evil/ and http://127.0.0.1.evil/ through)"""
    for url in ("http://10.1.2.3:6443", "http://127.0.0.1@evil.example:6443/",
                "http://127.0.0.1.evil.example:6443", "http://localhost@evil.example/",
                "http://user:pw@127.0.0.1:6443", "ftp://127.0.0.1/", "https://"):
        p = e.start(server=url)
        check(p.wait(10) == 2, "exit 2 for %s" % url)
        check("https://" in e.log() or "URL" in e.log(), e.log())
    # loopback in every spelling works
    e.sc()
    port = e.api.url.rsplit(":", 1)[1]
    e.start(server="http://localhost:%s/" % port)
    c = e.pvc("lo")
    wait_for(lambda: e.bound(c), "bound over http://localhost")


# --- issue 19: which claims, ownership, refusals, the PV finalizer ---------------------------

@case
def claim_not_handed_over(e):
    """a claim the controller-manager has not handed over (no storage-provisioner annotation)
    is left alone; it then binds to an administrator's matching static PV, and no PV or
    directory is ever made for it (failed before: provisioned at once, an orphan PV)"""
    e.sc()
    e.st.cm_paused = True
    e.start()
    c = e.pvc("static-wanted", size="2Gi")
    wait_for(lambda: e.st.count("WATCH", "/api/v1/persistentvolumeclaims") >= 1, "watching")
    time.sleep(1.5)
    check(e.pv_of(c) is None and e.tree() == [], "nothing for a claim not handed over: %s" % e.tree())
    e.st.put("persistentvolumes", {
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "admin-pv"},
        "spec": {"capacity": {"storage": "5Gi"}, "accessModes": ["ReadWriteMany"],
                 "storageClassName": "nfs", "persistentVolumeReclaimPolicy": "Retain",
                 "flexVolume": {"driver": PROV, "options": {"server": "s", "share": "/admin"}}},
        "status": {"phase": "Available"}})
    e.st.cm_resume()
    wait_for(lambda: (e.claim("static-wanted")["spec"].get("volumeName") == "admin-pv"),
             "claim bound to the static PV")
    time.sleep(1.5)
    check(e.pv_of(c) is None, "no pvc-<uid> PV")
    check(e.tree() == [] and e.owner_records() == {}, "no directory: %s" % e.tree())
    check(not e.events(c), "no event: %s" % e.events(c))
    # and a claim handed over later is provisioned
    e.st.cm_paused = True
    d = e.pvc("dynamic")
    time.sleep(1)
    check(e.pv_of(d) is None, "not before the hand-over")
    e.st.cm_resume()
    wait_for(lambda: e.bound(d), "bound once handed over")


@case
def refused_claims_and_classes(e):
    """dataSource, dataSourceRef (clone, snapshot), spec.selector, a class's mountOptions and
    allowVolumeExpansion: a ProvisioningFailed event each, no PV, no directory; a claim
    for a volume populator (non-core dataSourceRef) is left alone, no event (failed before:
    an empty directory and ProvisioningSucceeded for each)"""
    e.sc()
    mo = e.sc(name="withmo")
    mo["mountOptions"] = ["hard", "nfsvers=4.1"]
    e.st.put("storageclasses", mo)
    ex = e.sc(name="expand")
    ex["allowVolumeExpansion"] = True
    e.st.put("storageclasses", ex)
    e.start()
    src = {"kind": "PersistentVolumeClaim", "name": "origin"}
    snap = {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "snap-1"}
    cases = [
        (e.pvc("clone", spec={"dataSource": src, "dataSourceRef": src}), "clon"),
        (e.pvc("restore", spec={"dataSource": snap, "dataSourceRef": snap}), "snapshot"),
        (e.pvc("refonly", spec={"dataSourceRef": src}), "clon"),
        (e.pvc("picky", spec={"selector": {"matchLabels": {"tier": "gold"}}}), "selector"),
        (e.pvc("mo", sc="withmo"), "mountOptions"),
        (e.pvc("grow", sc="expand"), "allowVolumeExpansion"),
    ]
    pop = e.pvc("populated", spec={"dataSourceRef": {"apiGroup": "example.com", "kind": "Seed",
                                                     "name": "s1"}})
    for c, why in cases:
        ev = wait_for(lambda c=c: e.events(c, "ProvisioningFailed"), "ProvisioningFailed: " + why)
        check(why in ev[0]["message"] and ev[0]["type"] == "Warning",
              "the message says why (%s): %s" % (why, ev[0]["message"]))
    time.sleep(1)
    check(not e.st.items("persistentvolumes"), "no PV: %s" %
          [p["metadata"]["name"] for p in e.st.items("persistentvolumes")])
    check(e.tree() == [] and e.owner_records() == {}, "no directory: %s" % e.tree())
    check(not e.events(pop), "the populator's claim: no event %s" % e.events(pop))
    check(all(not (e.claim(c["metadata"]["name"])["metadata"].get("finalizers")) for c, _ in cases),
          "no finalizer left on refused claims")


@case
def existing_directory_not_reused(e):
    """a directory that exists without an owner record is never reused (failed before: mkdir
    EEXIST was success, the PV pointed at someone's data); after the refusal the claim's
    deletion leaves it alone; adoptExisting=true adopts it, with an event"""
    e.sc(params={"server": "s", "share": "/x", "pathPattern": "${namespace}/${pvc}"})
    os.makedirs(os.path.join(e.root, "default", "data"))
    with open(os.path.join(e.root, "default", "data", "someone.txt"), "w") as f:
        f.write("theirs")
    os.makedirs(os.path.join(e.root, "default", "empty"))
    e.start()
    c = e.pvc("data")
    ev = wait_for(lambda: e.events(c, "ProvisioningFailed"), "ProvisioningFailed")
    check("exists" in ev[0]["message"] and "adoptExisting" in ev[0]["message"], ev[0]["message"])
    # an empty one too: emptiness proves nothing about who made it
    c2 = e.pvc("empty")
    wait_for(lambda: e.events(c2, "ProvisioningFailed"), "ProvisioningFailed for the empty one")
    time.sleep(0.5)
    check(e.pv_of(c) is None and e.pv_of(c2) is None, "no PV")
    check(e.owner_records() == {}, "no owner record written: %s" % e.owner_records())
    e.st.api_delete("persistentvolumeclaims", "default", "empty")
    wait_for(lambda: e.claim("empty") is None, "claim gone")
    time.sleep(1)
    check(os.path.isdir(os.path.join(e.root, "default", "empty")), "someone's empty directory kept")
    check(open(os.path.join(e.root, "default", "data", "someone.txt")).read() == "theirs", "data kept")
    # the class opts in: adopted, with an event, mode left as it was
    e.sc(params={"server": "s", "share": "/x", "pathPattern": "${namespace}/${pvc}",
                 "adoptExisting": "true"})
    os.chmod(os.path.join(e.root, "default", "data"), 0o750)
    wait_for(lambda: e.bound(c), "adopted at the next retry", 20)
    ev = wait_for(lambda: e.events(c, "AdoptedExistingVolume"), "an event for the adoption")
    check("default/data" in ev[0]["message"], ev[0]["message"])
    check(e.owner_of("default/data") == c["metadata"]["uid"], "owner record written")
    check(stat.S_IMODE(os.stat(os.path.join(e.root, "default", "data")).st_mode) == 0o750,
          "an adopted directory keeps its mode")


@case
def recreated_claim_same_name(e):
    """a claim deleted while its PV is kept (Retain) and re-created under the same name (a
    StatefulSet, a Helm reinstall): the new claim is refused, never pointed at the old PV's
    directory; once the old PV is reclaimed, the new claim gets a fresh one (failed before:
    both PVs on one directory, and reclaiming the old one destroyed the new one's data)"""
    e.sc(params={"server": "s", "share": "/x", "pathPattern": "${namespace}/${pvc}",
                 "onDelete": "delete"}, reclaim="Retain")
    e.start()
    old = e.pvc("data")
    wait_for(lambda: e.bound(old), "first claim bound")
    with open(os.path.join(e.root, "default/data/old.txt"), "w") as f:
        f.write("old")
    e.st.api_delete("persistentvolumeclaims", "default", "data")
    wait_for(lambda: e.pv_of(old)["status"]["phase"] == "Released", "old PV released")
    new = e.pvc("data")
    ev = wait_for(lambda: e.events(new, "ProvisioningFailed"), "the new claim is refused")
    check("owned by" in ev[0]["message"] and old["metadata"]["uid"] in ev[0]["message"],
          ev[0]["message"])
    check(e.pv_of(new) is None, "no PV for the new claim on the old directory")
    # the administrator lets the old volume go
    pv = e.pv_of(old)
    pv["spec"]["persistentVolumeReclaimPolicy"] = "Delete"
    e.st.put("persistentvolumes", pv)
    wait_for(lambda: e.pv_of(old) is None, "old PV reclaimed")
    wait_for(lambda: e.bound(new), "the new claim gets its own directory", 20)
    check(e.tree() == ["default", "default/data"], "fresh directory: %s" % e.tree())
    check(e.owner_of("default/data") == new["metadata"]["uid"], "owned by the new claim")


@case
def reclaim_only_owned(e):
    """a released PV of ours whose directory has no owner record, or another claim's, is
    not touched: a VolumeFailedDelete event on the PV, the PV kept (failed before: the
    directory was archived or deleted)"""
    e.sc(params={"server": "s", "share": "/x", "onDelete": "delete"})
    e.start()
    owner = e.pvc("owner")
    wait_for(lambda: e.bound(owner), "bound")
    od = dirname_of(owner)
    os.mkdir(os.path.join(e.root, "victim"))
    with open(os.path.join(e.root, "victim", "data.txt"), "w") as f:
        f.write("precious")

    def forged(name, sub):
        return e.st.put("persistentvolumes", {
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": name, "annotations": {"pv.kubernetes.io/provisioned-by": PROV}},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                     "storageClassName": "nfs", "persistentVolumeReclaimPolicy": "Delete",
                     "claimRef": {"namespace": "default", "name": "gone", "uid": str(uuid.uuid4())},
                     "flexVolume": {"driver": PROV, "options": {"server": "s", "share": "/x",
                                                                "subPath": sub}}},
            "status": {"phase": "Released"}})
    a = forged("pvc-forged-unowned", "victim")
    b = forged("pvc-forged-other", od)
    for pv in (a, b):
        ev = wait_for(lambda pv=pv: [x for x in e.st.items("events")
                                     if x["involvedObject"]["name"] == pv["metadata"]["name"] and
                                     x["reason"] == "VolumeFailedDelete"], "VolumeFailedDelete")
        check(ev[0]["involvedObject"]["kind"] == "PersistentVolume" and ev[0]["type"] == "Warning",
              "event on the PV: %s" % ev[0])
    time.sleep(1)
    check(open(os.path.join(e.root, "victim", "data.txt")).read() == "precious", "unowned kept")
    check(od in e.tree() and e.bound(owner), "the other claim's directory kept")
    check(e.st.get("persistentvolumes", "pvc-forged-unowned") is not None, "PV kept")


@case
def pattern_claim_values_need_namespace(e):
    """a pathPattern with ${.PVC.labels.*} / ${.PVC.annotations.*} whose first directory is
    not the namespace is refused (claim authors in two namespaces could pick one path), unless
    the class sets allowUnscopedClaimValues=true (failed before: accepted)"""
    e.sc(name="unscoped", params={"server": "s", "share": "/x",
                                  "pathPattern": "${.PVC.labels.app}/${pvc}"})
    e.sc(name="mixed", params={"server": "s", "share": "/x",
                               "pathPattern": "${namespace}-${.PVC.annotations.t}"})
    e.sc(name="optin", params={"server": "s", "share": "/x", "allowUnscopedClaimValues": "true",
                               "pathPattern": "${.PVC.labels.app}/${pvc}"})
    e.sc(name="scoped", params={"server": "s", "share": "/x",
                                "pathPattern": "${.PVC.namespace}/${.PVC.labels.app}"})
    e.start()
    a = e.pvc("a", sc="unscoped", labels={"app": "x"})
    b = e.pvc("b", sc="mixed", annotations={"t": "y"})
    for c in (a, b):
        ev = wait_for(lambda c=c: e.events(c, "ProvisioningFailed"), "refused")
        check("namespace" in ev[0]["message"] and "allowUnscopedClaimValues" in ev[0]["message"],
              ev[0]["message"])
    o = e.pvc("o", sc="optin", labels={"app": "x"})
    s_ = e.pvc("s", sc="scoped", labels={"app": "y"})
    wait_for(lambda: e.bound(o) and e.bound(s_), "opt-in and scoped classes work")
    check(e.tree() == ["default", "default/y", "x", "x/o"], e.tree())


@case
def nested_volume_refused(e):
    """a class whose directory would sit inside another volume's directory is refused: that
    volume's pods would see (and its reclaim would remove) the new one"""
    e.sc(name="per-ns", params={"server": "s", "share": "/x", "pathPattern": "${namespace}"})
    e.sc(name="inner", params={"server": "s", "share": "/x", "pathPattern": "${namespace}/${pvc}"})
    e.start()
    outer = e.pvc("outer", ns="team", sc="per-ns")
    wait_for(lambda: e.bound(outer), "outer bound")
    inner = e.pvc("inner", ns="team", sc="inner")
    ev = wait_for(lambda: e.events(inner, "ProvisioningFailed"), "refused")
    check("inside" in ev[0]["message"], ev[0]["message"])
    check(e.tree() == ["team"], e.tree())


@case
def pv_deleted_while_down(e):
    """the PV object deleted (after its claim) while the provisioner is down: the
    deletion-protection finalizer holds it, and the restarted provisioner reclaims the
    directory, then removes the finalizer (failed before: the PV vanished, the directory
    leaked)"""
    e.sc(params={"server": "s", "share": "/x", "onDelete": "delete"})
    p = e.start()
    c = e.pvc("bye")
    wait_for(lambda: e.bound(c), "bound")
    check(PV_FINALIZER in e.pv_of(c)["metadata"].get("finalizers", []), "finalizer on the PV")
    e.kill(p)
    e.st.api_delete("persistentvolumeclaims", "default", "bye")
    e.st.api_delete("persistentvolumes", "", "pvc-" + c["metadata"]["uid"])
    check(e.pv_of(c) is not None and e.pv_of(c)["metadata"].get("deletionTimestamp"),
          "the PV waits for its finalizer")
    e.start()
    wait_for(lambda: e.pv_of(c) is None, "PV gone after the restart")
    check(e.tree() == [] and e.owner_records() == {}, "directory reclaimed: %s" % e.tree())


@case
def finalizer_follows_policy(e):
    """a PV made by an older version (no finalizer) gets it; a PV switched to Retain loses it;
    a Retain class's PV never has it"""
    e.sc()
    e.sc(name="keep", reclaim="Retain")
    e.start()
    c = e.pvc("c")
    k = e.pvc("k", sc="keep")
    wait_for(lambda: e.bound(c) and e.bound(k), "bound")
    check(not e.pv_of(k)["metadata"].get("finalizers"), "no finalizer with Retain")
    pv = e.pv_of(c)
    pv["metadata"]["finalizers"] = []
    e.st.put("persistentvolumes", pv)
    wait_for(lambda: PV_FINALIZER in (e.pv_of(c)["metadata"].get("finalizers") or []),
             "finalizer added back")
    pv = e.pv_of(c)
    pv["spec"]["persistentVolumeReclaimPolicy"] = "Retain"
    e.st.put("persistentvolumes", pv)
    wait_for(lambda: PV_FINALIZER not in (e.pv_of(c)["metadata"].get("finalizers") or []),
             "finalizer removed with Retain")


@case
def on_delete_recorded_wins(e):
    """onDelete recorded on the PV at provisioning wins over the class as it is now: a class
    re-created with onDelete=delete does not delete a volume provisioned as retain (failed
    before: deleted)"""
    e.sc(params={"server": "s", "share": "/x", "onDelete": "retain"})
    e.start()
    c = e.pvc("keepme")
    wait_for(lambda: e.bound(c), "bound")
    d = dirname_of(c)
    with open(os.path.join(e.root, d, "data.txt"), "w") as f:
        f.write("precious")
    e.st.remove("storageclasses", "", "nfs")
    e.sc(params={"server": "s", "share": "/x", "onDelete": "delete"})
    e.st.api_delete("persistentvolumeclaims", "default", "keepme")
    wait_for(lambda: e.pv_of(c) is None, "PV deleted")
    check(e.tree() == [d, d + "/data.txt"], "retained: %s" % e.tree())


@case
def archive_long_name(e):
    """archiving a directory whose name is 255 bytes: the archive name is bounded (truncated,
    with a hash), the PV deleted (failed before: ENAMETOOLONG, retried forever)"""
    e.sc(params={"server": "s", "share": "/x", "pathPattern": "${namespace}/${.PVC.annotations.n}"})
    e.start()
    long1, long2 = "a" * 255, "a" * 254 + "b"
    c1 = e.pvc("one", annotations={"n": long1})
    c2 = e.pvc("two", annotations={"n": long2})
    wait_for(lambda: e.bound(c1) and e.bound(c2), "bound")
    for name in ("one", "two"):
        e.st.api_delete("persistentvolumeclaims", "default", name)
    wait_for(lambda: e.pv_of(c1) is None and e.pv_of(c2) is None, "PVs deleted")
    names = os.listdir(os.path.join(e.root, "default"))
    names = [n for n in names if not n.startswith(OWNER_PREFIX)]
    check(len(names) == 2 and all(n.startswith("archived-") and len(n) <= 255 for n in names),
          "two bounded archive names: %s" % names)


@case
def record_owners_migration(e):
    """a PV made before owner records (its directory has none) is not reclaimed
    (VolumeFailedDelete) until --record-owners writes the record from its claimRef"""
    e.sc()
    p = e.start()
    c = e.pvc("legacy")
    wait_for(lambda: e.bound(c), "bound")
    d = dirname_of(c)
    e.kill(p)
    for rec in e.owner_records():
        os.unlink(os.path.join(e.root, rec))  # as an older version left it
    e.st.api_delete("persistentvolumeclaims", "default", "legacy")
    p = e.start()
    wait_for(lambda: [x for x in e.st.items("events") if x["reason"] == "VolumeFailedDelete"],
             "VolumeFailedDelete without a record")
    check(d in e.tree() and e.pv_of(c) is not None, "directory and PV kept")
    e.kill(p)
    e.start("--record-owners")
    wait_for(lambda: e.pv_of(c) is None, "reclaimed once the owner is recorded")
    check(e.tree() == ["archived-" + d], e.tree())
    check("owner record written" in e.log(), "the migration is logged")


@case
def half_started_watches(e):
    """the claim watch starts, the PV watch cannot (the PV list's resourceVersion is not
    URL text): nothing is left half-started, retries back off, and once the server is sane
    again everything works (before: the started watch leaked each time, and after four the
    set was full for good: 'Argument list too long', re-listing in a loop)"""
    e.sc()
    e.st.bad_list_rv = "persistentvolumes"
    e.start()
    wait_for(lambda: e.log().count("cannot start watches") >= 3, "three failed starts", 20)
    check("Argument list too long" not in e.log(), "no watch leaked: %s" % e.log())
    check("next try in 4 s" in e.log(), "the retries back off")
    e.st.bad_list_rv = None
    c = e.pvc("after")
    wait_for(lambda: e.bound(c), "bound once the watches start", 30)
    check("Argument list too long" not in e.log(), "no watch leaked")


# --- what Kubernetes users expect of a provisioner: events, log lines, metrics ---------------

# klog's header: severity, mmdd, UTC time to the microsecond, pid padded to 7, file:line]
KLOG = re.compile(r"^([IWE])(\d{4}) (\d\d:\d\d:\d\d\.\d{6}) +(\d+) ([a-z-]+\.c):(\d+)\] (.*)$")


def klog_lines(text):
    """every line of @text parsed as klog's; a line that is not fails"""
    out = []
    for line in text.splitlines():
        m = KLOG.match(line)
        check(m, "not a klog line: %r" % line)
        out.append(m)
    return out


@case
def log_lines_klog(e):
    """every log line has klog's header (severity I/W/E, time, pid, source file:line); events
    are structured lines ("Event occurred" object=... reason=... message=...), a Warning event
    a W line; a failure to reach the API server a W line; quotes in values escaped"""
    e.sc()
    e.sc(name="bad", params={"server": "s", "share": "/x", "colour": "blue"})
    p = e.start()
    ok = e.pvc("ok")
    bad = e.pvc("bad", sc="bad")
    wait_for(lambda: e.bound(ok), "bound")
    wait_for(lambda: e.events(bad, "ProvisioningFailed"), "failure event")
    # the line is written before the event is POSTed: wait for the POST too, or it may meet
    # the throttle below and take some of its refusals (seen once in CI)
    wait_for(lambda: e.events(ok, "ProvisioningSucceeded"), "the success event")
    wait_for(lambda: "ProvisioningSucceeded" in e.log(), "the success logged")
    lines = klog_lines(e.log())
    check(all(int(m.group(4)) == p.pid for m in lines if m.group(5) != "backend-nfs.c"),
          "the pid is the provisioner's (a storage child logs its own)")
    ev = [m for m in lines if m.group(7).startswith('"Event occurred" ')]
    succ = [m for m in ev if 'reason="ProvisioningSucceeded"' in m.group(7)]
    fail = [m for m in ev if 'reason="ProvisioningFailed"' in m.group(7)]
    check(succ and succ[0].group(1) == "I" and 'type="Normal"' in succ[0].group(7) and
          'object="default/ok"' in succ[0].group(7) and
          'kind="PersistentVolumeClaim"' in succ[0].group(7), "success: an I line: %s" % succ)
    check(succ[0].group(5) == "provision.c", "the caller's source line: %s" % succ[0].group(0))
    check(fail and fail[0].group(1) == "W" and 'type="Warning"' in fail[0].group(7),
          "failure: a W line: %s" % fail)
    # values are quoted as klog quotes them: the quotes in the Provisioning message escaped
    check(any(m.group(7).endswith(r'message="%s is provisioning a volume for claim \"default/ok\""'
                                  % PROV) for m in ev), "quotes escaped: %s" % [m.group(7) for m in ev])
    # an event the API server keeps refusing: a W line that says so
    e.st.throttle("POST", "/api/v1/namespaces/default/events", n=3, retry_after=0)
    late = e.pvc("late")
    wait_for(lambda: e.bound(late), "bound")
    warn = wait_for(lambda: [m for m in klog_lines(e.log()) if m.group(1) == "W" and
                             "not sent" in m.group(7)], "a W line for the event not sent")
    check("HTTP 429" in warn[0].group(7) and warn[0].group(5) == "events.c", warn[0].group(0))


@case
def events_never_hold_a_worker(e):
    """events are posted by a thread of their own: with the API server answering every event
    POST slowly (429 with Retry-After: 5 s, waited out, twice: 10 s), the claim's PV is made
    while its events still wait; they follow, in their order (failed before: the worker posted
    the Provisioning event itself, and made the PV only once it was in)"""
    e.sc()
    e.start()
    e.st.throttle("POST", "/api/v1/namespaces/default/events", n=2, retry_after=5)
    c = e.pvc("quick")
    wait_for(lambda: e.pv_of(c), "the PV", 30)
    check(not e.events(c), "the PV before any event: %s" % [x["reason"] for x in e.events(c)])
    wait_for(lambda: e.events(c, "ProvisioningSucceeded"), "the events, after", 40)
    order = [x["reason"] for x in e.events(c)]
    check(order == ["Provisioning", "ProvisioningSucceeded"], "in their order: %s" % order)


@case
def provisioning_and_skip_events(e):
    """a Normal "Provisioning" event when work on a claim starts (before its outcome); a refused
    claim gets it once, not at every retry; a claim handed to us whose class is gone, or names
    another of our provisioners, gets a ProvisioningSkipped warning (kubectl describe pvc says
    why it is Pending); a class on another share a Normal ProvisioningSkipped"""
    e.sc()
    e.sc(name="bad", params={"server": "s", "share": "/x", "colour": "blue"})
    e.sc(name="loopish", provisioner="flexvol/loop", params={})
    e.sc(name="elsewhere", params={"server": "other.example.com", "share": "/other"})
    e.start("--share", "nfs.example.com:/export/k8s")
    ok = e.pvc("ok")
    bad = e.pvc("bad", sc="bad")
    gone = e.pvc("gone", sc="gone", provisioner=PROV)
    loopish = e.pvc("loopish", sc="loopish", provisioner=PROV)
    elsewhere = e.pvc("elsewhere", sc="elsewhere")
    wait_for(lambda: e.bound(ok), "bound")
    # events come from their own thread: the last of them may follow the bind
    wait_for(lambda: e.events(ok, "ProvisioningSucceeded"), "the success event")
    prov = e.events(ok, "Provisioning")
    check(len(prov) == 1 and prov[0]["type"] == "Normal" and '"default/ok"' in prov[0]["message"]
          and PROV in prov[0]["message"], "one Provisioning event: %s" % prov)
    order = [x["reason"] for x in e.events(ok)]
    check(order.index("Provisioning") < order.index("ProvisioningSucceeded"), "before: %s" % order)
    wait_for(lambda: e.events(bad, "ProvisioningFailed"), "the refusal")
    check(e.events(bad, "Provisioning"), "a refused claim: Provisioning too")
    sk = wait_for(lambda: e.events(gone, "ProvisioningSkipped"), "class gone: an event")
    check(sk[0]["type"] == "Warning" and "'gone'" in sk[0]["message"] and
          "does not exist" in sk[0]["message"], sk[0]["message"])
    sk = wait_for(lambda: e.events(loopish, "ProvisioningSkipped"), "another provisioner's class")
    check(sk[0]["type"] == "Warning" and "names flexvol/loop" in sk[0]["message"], sk[0]["message"])
    sk = wait_for(lambda: e.events(elsewhere, "ProvisioningSkipped"), "another share: an event")
    check(sk[0]["type"] == "Normal" and "other.example.com:/other" in sk[0]["message"] and
          "--share" in sk[0]["message"], sk[0]["message"])
    for c in (gone, loopish, elsewhere):
        check(e.pv_of(c) is None and not e.events(c, "Provisioning"), "skipped, not started")
    # retries (backoff 0.5..2 s) and resyncs (5 s) repeat none of them
    # (the class comes from the class watch: each retry shows as its logged Provisioning event)
    wait_for(lambda: e.all_logs().count('object="default/bad" kind="PersistentVolumeClaim" '
                                        'type="Normal" reason="Provisioning"') >= 4,
             "the refused claim retried", 20)
    time.sleep(e.resync + 0.5)
    for c, reason in ((bad, "Provisioning"), (bad, "ProvisioningFailed"), (gone, "ProvisioningSkipped"),
                      (elsewhere, "ProvisioningSkipped")):
        check(len(e.events(c, reason)) == 1, "%s once for %s: %s" % (
            reason, c["metadata"]["name"], [x["message"] for x in e.events(c, reason)]))
    check(e.tree() == [dirname_of(ok)], "one directory: %s" % e.tree())


@case
def metrics_labels_build_process(e):
    """provision counts and durations labelled by backend and class (bounded: past 48 classes
    the rest count as class="_other", never a series per claim); flexvol_provisioner_build_info
    with the version; Prometheus' process metrics (CPU, descriptors, memory, start time)"""
    n = 52
    for i in range(n):
        e.sc(name="bad%02d" % i, params={"server": "s", "share": "/x", "colour": "blue"})
    e.sc()
    p = e.start()
    t0 = time.time()
    url = http_url(e, 0)
    ok = e.pvc("ok")
    wait_for(lambda: e.bound(ok), "bound")
    claims = [e.pvc("c%02d" % i, sc="bad%02d" % i) for i in range(n)]
    for c in claims:
        wait_for(lambda c=c: e.events(c, "ProvisioningFailed"), "refused", 30)
    body = wait_for(lambda: (lambda b: b if metric(
        b, 'flexvol_provisioner_provision_total{backend="%s",class="nfs",result="success"}' % PROV)
        == 1 else None)(http_get(url + "/metrics")[1]), "the success counted")
    classes = set(re.findall(r'^flexvol_provisioner_provision_total\{backend="[^"]*",class="([^"]*)",'
                             r'result="failure"\}', body, re.M))
    check(len(classes) <= 49 and "_other" in classes, "bounded: %d classes %s" % (len(classes), classes))
    fails = sum(float(v) for v in re.findall(
        r'^flexvol_provisioner_provision_total\{[^}]*result="failure"\} (\S+)$', body, re.M))
    check(fails >= n, "every failure counted: %s" % fails)
    check("pvc-" not in body and "c00" not in body, "no claim in a label")
    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__)))), "VERSION")) as f:
        version = f.read().strip()
    m = re.search(r'^flexvol_provisioner_build_info\{version="([^"]*)",compiler="[^"]+",'
                  r'arch="(amd64|arm64|other)"\} 1$', body, re.M)
    check(m and m.group(1).startswith(version), "build_info: %s" % (m and m.group(0)))
    check("# TYPE process_cpu_seconds_total counter" in body, "process CPU")
    check(metric(body, "process_cpu_seconds_total") > 0, "CPU spent")
    check(metric(body, "process_max_fds") >= 64, "descriptor limit")
    if not CHROOT:  # /proc: not in the empty chroot
        fds = len(os.listdir("/proc/%d/fd" % p.pid))
        check(abs(metric(body, "process_open_fds") - fds) <= 8, "open fds %s ~ %d" % (
            metric(body, "process_open_fds"), fds))
        check(1 << 20 < metric(body, "process_resident_memory_bytes") < 1 << 30, "RSS")
        check(metric(body, "process_virtual_memory_bytes") >= metric(body, "process_resident_memory_bytes"),
              "virtual >= resident")
        check(abs(metric(body, "process_start_time_seconds") - t0) < 5, "start time %s ~ %s" % (
            metric(body, "process_start_time_seconds"), t0))


# the flexvol/loop cases (controller and node agent) live in their own file
import loop_cases  # noqa: E402

loop_cases.register(sys.modules[__name__])

# object shapes the API server accepts, one family per case (issue 24)
import shape_cases  # noqa: E402

shape_cases.register(sys.modules[__name__])

# migrate and the provisioner (issue 37 point 6)
import migrate_cases  # noqa: E402

migrate_cases.register(sys.modules[__name__])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("-k", action="append", default=[])
    ap.add_argument("--chroot", action="store_true",
                    help="run the (static) provisioner alone in an empty chroot")
    ap.add_argument("--emulator", help="run it under this qemu-user binary (a cross build)")
    a = ap.parse_args()
    global CHROOT, EMULATOR
    CHROOT = a.chroot
    EMULATOR = a.emulator
    build = os.path.abspath(a.build)
    passed = failed = skipped = 0
    for fn in CASES:
        if a.k and not any(k in fn.__name__ for k in a.k):
            continue
        if CHROOT and fn.__name__.startswith("loop_"):
            # the node agent asks the node's /proc and /dev/loop* whether an image is bound:
            # an empty chroot has neither (the agent runs on the node, never in the
            # controller-manager's distroless container)
            continue
        e = Env(build)
        t0 = time.time()
        try:
            fn(e)
            passed += 1
            print("ok   %s (%.1f s)" % (fn.__name__, time.time() - t0), flush=True)
        except Skip as ex:
            skipped += 1
            print("skip %s: %s" % (fn.__name__, ex), flush=True)
        except Exception as ex:
            failed += 1
            print("FAIL %s: %s" % (fn.__name__, ex), flush=True)
            if not isinstance(ex, Fail):
                traceback.print_exc()
            for i in range(len(e.logs)):
                print("  --- provisioner log %d:" % i)
                print("".join("  | " + l for l in e.log(i).splitlines(True)[-25:]))
        finally:
            e.close()
    print("provisioner: %d passed, %d failed%s" % (passed, failed,
                                                ", %d skipped" % skipped if skipped else ""))
    sys.exit(0 if failed == 0 else 1)


if __name__ == "__main__":
    main()
