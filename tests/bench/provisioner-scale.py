#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""flexvol-provisioner at cluster scale, against the real API server and controller-manager.

    python3 tests/bench/provisioner-scale.py --build build [--bin DIR] [--foreign 10000]
                                             [--claims 1000] [--limit-mib 64] [--timeout 1800]

etcd, kube-apiserver (with an audit log) and kube-controller-manager's PV controllers come from
the cluster lane's binaries (tests/kube/build; started by tests/kube/property.py's
RealApiServer, on free loopback ports and a temporary directory of their own, run from hard
links there: never the cluster lane's, and out of reach of its teardown's stray sweep).  No kubelet: the binder hands claims over and binds them.

1. --foreign claims of another provisioner's class (example.com/other) are created;
2. flexvol-provisioner starts with the shipped Deployment's flags (deploy/provisioner/
   deployment.yaml: defaults, 4 workers, leader election, --provisioners=flexvol/nfs,
   --share) in a memory cgroup of its own limited as the Deployment limits it (64Mi): an OOM
   kill ends the run as a failure; its storage children run in the same cgroup;
3. once it is ready (/readyz), --claims flexvol/nfs claims are created at once.

Measured: the time to the last PV and to the last claim Bound (from the first claim created),
the last hand-over (the controller-manager's volume.kubernetes.io/storage-provisioner
annotation) to the last PV, PV made to claim Bound (the binder's share), the cgroup's peak
memory (the provisioner and its deadline children together; the page cache of its log is not
in it: the log goes through a pipe), the provisioner's own VmHWM, its CPU seconds (its
children's included), and from the audit log every request it made, per provisioned claim.
Checked: no PV before its claim's hand-over (etcd revisions, not clocks), no claim with two
PVs, the provisioner never exited, and the targets (--target-s from the last hand-over to the
last PV, --peak-mib).  Exit status 1 when one is missed.  Prints one JSON line last
(--json FILE writes it too).
"""

import argparse
import collections
import datetime
import http.client
import json
import os
import queue
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "kube"))
import property as kp  # noqa: E402  (RealApiServer, Api, TOKEN, free_port, kill_pid)

sys.path.insert(0, HERE)
audit_breakdown = __import__("provisioner-audit").breakdown  # noqa: E402

NFS = "flexvol/nfs"
ANN_SP = "volume.kubernetes.io/storage-provisioner"
SHARE = "nfs.example.com:/exports/k8s"
CG_ROOT = "/sys/fs/cgroup/memory"

AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Metadata
"""


def log(msg):
    print("scale: " + msg, flush=True)


class Conn:
    """One keep-alive HTTPS connection to the API server (per thread)."""

    def __init__(self, url, ca):
        host, port = url.split("//", 1)[1].rsplit(":", 1)
        self.host, self.port = host, int(port)
        self.ctx = ssl.create_default_context(cafile=ca)
        self.c = None

    def call(self, method, path, body=None, timeout=60):
        for attempt in range(5):
            try:
                if self.c is None:
                    self.c = http.client.HTTPSConnection(self.host, self.port, context=self.ctx,
                                                         timeout=timeout)
                self.c.request(method, path, body=json.dumps(body) if body is not None else None,
                               headers={"Authorization": "Bearer " + kp.TOKEN,
                                        "Content-Type": "application/json",
                                        "User-Agent": "flexvol-scale-bench"})
                r = self.c.getresponse()
                data = r.read()
                if r.status == 429:
                    time.sleep(1)
                    continue
                return r.status, data
            except (OSError, http.client.HTTPException):
                self.c = None
                time.sleep(0.5 * (attempt + 1))
        raise RuntimeError("%s %s: no answer" % (method, path))


def claim(ns, name, cls, size="1Gi"):
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": ns, "labels": {"app": "scale-bench"}},
            "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": cls,
                     "resources": {"requests": {"storage": size}}}}


def create_many(url, ca, ns, prefix, n, cls, threads=8):
    """Create @n claims @prefix-<i> in @ns from @threads connections; returns the seconds taken."""
    todo = queue.Queue()
    for i in range(n):
        todo.put(i)
    errors = []

    def run():
        c = Conn(url, ca)
        while True:
            try:
                i = todo.get_nowait()
            except queue.Empty:
                return
            st, data = c.call("POST", "/api/v1/namespaces/%s/persistentvolumeclaims" % ns,
                              claim(ns, "%s-%05d" % (prefix, i), cls))
            if st != 201:
                errors.append("%d %s" % (st, data[:200]))

    t0 = time.monotonic()
    ts = [threading.Thread(target=run) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise RuntimeError("creating claims: %d failed, first: %s" % (len(errors), errors[0]))
    return time.monotonic() - t0


class Watcher(threading.Thread):
    """A watch of @path from @rv: every event to @fn(type, object, monotonic time); resumed."""

    def __init__(self, url, ca, path, rv, fn):
        super().__init__(daemon=True)
        self.conn, self.path, self.rv, self.fn = Conn(url, ca), path, rv, fn
        self.stop = False

    def run(self):
        while not self.stop:
            try:
                c = self.conn
                hc = http.client.HTTPSConnection(c.host, c.port, context=c.ctx, timeout=120)
                hc.request("GET", "%s?watch=1&allowWatchBookmarks=true&resourceVersion=%s"
                           "&timeoutSeconds=60" % (self.path, self.rv),
                           headers={"Authorization": "Bearer " + kp.TOKEN,
                                    "User-Agent": "flexvol-scale-bench"})
                r = hc.getresponse()
                if r.status != 200:
                    raise RuntimeError("watch %s: HTTP %d" % (self.path, r.status))
                while not self.stop:
                    line = r.readline()
                    if not line:
                        break
                    ev = json.loads(line)
                    obj = ev.get("object") or {}
                    if ev.get("type") == "ERROR":
                        raise RuntimeError("watch %s: %s" % (self.path, obj))
                    self.rv = obj.get("metadata", {}).get("resourceVersion", self.rv)
                    if ev.get("type") != "BOOKMARK":
                        self.fn(ev["type"], obj, time.monotonic())
                hc.close()
            except (OSError, http.client.HTTPException, ValueError) as e:
                if not self.stop:
                    log("watch %s: %s; resumed" % (self.path, e))
                    time.sleep(0.5)


class Observed:
    """What the bench's own watches saw of the flexvol claims and the PVs."""

    def __init__(self):
        self.lock = threading.Lock()
        self.handover = {}   # claim uid -> (monotonic, revision) of the first hand-over seen
        self.bound = {}      # claim uid -> monotonic of Bound
        self.pvs = {}        # PV name -> (monotonic, creation revision, claim uid)
        self.claims = set()  # uids of the claims seen

    def claim_event(self, typ, o, t):
        m = o.get("metadata", {})
        uid = m.get("uid")
        with self.lock:
            self.claims.add(uid)
            if (m.get("annotations") or {}).get(ANN_SP) == NFS and uid not in self.handover:
                self.handover[uid] = (t, int(m.get("resourceVersion", "0")))
            if (o.get("status") or {}).get("phase") == "Bound" and uid not in self.bound:
                self.bound[uid] = t

    def pv_event(self, typ, o, t):
        m = o.get("metadata", {})
        ref = (o.get("spec") or {}).get("claimRef") or {}
        with self.lock:
            if typ == "ADDED" and m.get("name") not in self.pvs:
                self.pvs[m["name"]] = (t, int(m.get("resourceVersion", "0")), ref.get("uid"))


def cgroup_make(limit_mib):
    """A memory cgroup (v1 or v2) of our own below this process's, limited to @limit_mib."""
    name = "flexvol-scale-%d" % os.getpid()
    for line in open("/proc/self/cgroup"):
        hid, ctrl, path = line.rstrip("\n").split(":", 2)
        if "memory" in ctrl.split(","):
            d = os.path.join(CG_ROOT, path.lstrip("/"), name)
            os.mkdir(d)
            with open(os.path.join(d, "memory.limit_in_bytes"), "w") as f:
                f.write(str(limit_mib << 20))
            return d, "memory.max_usage_in_bytes", "memory.failcnt"
        if hid == "0" and not ctrl and os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
            base = os.path.join("/sys/fs/cgroup", path.lstrip("/"))
    d = os.path.join(base, name)
    os.mkdir(d)
    with open(os.path.join(d, "memory.max"), "w") as f:
        f.write(str(limit_mib << 20))
    return d, "memory.peak", "memory.events"


def loadavg():
    """The 1-minute load average: the machine is shared, every figure is reported with it."""
    return float(read("/proc/loadavg").split()[0] or 0)


def read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def proc_cpu_s(pid):
    """utime + stime + cutime + cstime of @pid (its waited-for children included), seconds."""
    f = read("/proc/%d/stat" % pid).rsplit(")", 1)[1].split()
    return sum(int(x) for x in f[11:15]) / os.sysconf("SC_CLK_TCK")


def vm_hwm_kib(pid):
    for line in read("/proc/%d/status" % pid).splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def audit_counts(path, since_wall):
    """The provisioner's requests in the audit log, at or after @since_wall: {verb resource: n}."""
    before, after = collections.Counter(), collections.Counter()
    with open(path, errors="replace") as f:
        for line in f:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if not e.get("userAgent", "").startswith("flexvol-provisioner"):
                continue
            ref = e.get("objectRef") or {}
            what = "%s %s%s" % (e.get("verb"), ref.get("resource", e.get("requestURI", "?")),
                                "/" + ref["subresource"] if ref.get("subresource") else "")
            t = e.get("requestReceivedTimestamp", "")
            (after if t >= since_wall else before)[what] += 1
    return before, after


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--provisioner", help="the binary (default: BUILD/flexvol-provisioner)")
    ap.add_argument("--bin", help="the Kubernetes binaries (default: tests/kube/build --print)")
    ap.add_argument("--foreign", type=int, default=10000)
    ap.add_argument("--claims", type=int, default=1000)
    ap.add_argument("--limit-mib", type=int, default=64, help="the Deployment's memory limit")
    ap.add_argument("--peak-mib", type=float, default=32, help="target: cgroup peak")
    ap.add_argument("--target-s", type=float, default=30,
                    help="target: last hand-over to last PV")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--json", help="write the result line here too")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    a = ap.parse_args()

    prov = os.path.abspath(a.provisioner or os.path.join(a.build, "flexvol-provisioner"))
    bindir = a.bin or subprocess.run([os.path.join(ROOT, "tests", "kube", "build"), "--print"],
                                     capture_output=True, text=True).stdout.strip()
    if not os.path.exists(os.path.join(os.path.dirname(bindir), "done")):
        log("no Kubernetes binaries in %s: run tests/kube/build first" % bindir)
        return 2
    tmp = tempfile.mkdtemp(prefix="fvscale-")
    share = os.path.join(tmp, "share")
    os.mkdir(share)
    audit = os.path.join(tmp, "audit.log")
    with open(os.path.join(tmp, "audit-policy.yaml"), "w") as f:
        f.write(AUDIT_POLICY)
    server = kp.RealApiServer(bindir, tmp, apiserver_args=[
        "--audit-policy-file=" + os.path.join(tmp, "audit-policy.yaml"),
        "--audit-log-path=" + audit, "--audit-log-format=json", "--audit-log-maxbackup=0",
        "--audit-log-maxsize=0", "--audit-log-mode=batch"], private_bin=True)
    p = cg = logf = None
    watchers = []
    fails = []
    res = {"foreign": a.foreign, "claims": a.claims, "provisioner": prov,
           "load_at_start": loadavg()}
    loads = []
    try:
        t0 = time.monotonic()
        server.up()
        log("etcd, kube-apiserver, kube-controller-manager up on %s in %.1f s (%s)" % (
            server.url, time.monotonic() - t0, tmp))
        api, url, ca = server.api, server.url, server.cert
        for ns in ("foreign", "bench"):
            api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                              "metadata": {"name": ns}})
        server_name, share_path = SHARE.split(":", 1)
        api.create("/apis/storage.k8s.io/v1/storageclasses", {
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": "other"}, "provisioner": "example.com/other"})
        api.create("/apis/storage.k8s.io/v1/storageclasses", {
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": "flexvol-nfs"}, "provisioner": NFS, "reclaimPolicy": "Delete",
            "parameters": {"server": server_name, "share": share_path}})
        took = create_many(url, ca, "foreign", "other", a.foreign, "other")
        log("%d claims of example.com/other created in %.1f s" % (a.foreign, took))

        obs = Observed()
        rv = api.get("/api/v1/persistentvolumes?limit=1")["metadata"]["resourceVersion"]
        watchers = [Watcher(url, ca, "/api/v1/namespaces/bench/persistentvolumeclaims", rv,
                            obs.claim_event),
                    Watcher(url, ca, "/api/v1/persistentvolumes", rv, obs.pv_event)]
        for w in watchers:
            w.start()

        tok = os.path.join(tmp, "token")
        with open(tok, "w") as f:
            f.write(kp.TOKEN)
        port = kp.free_port()
        cg, peak_file, fail_file = cgroup_make(a.limit_mib)
        argv = [prov, "--server", url, "--token-file", tok, "--certificate-authority", ca,
                "--provisioners=" + NFS, "--root=" + share, "--share=" + SHARE,
                "--http-endpoint=127.0.0.1:%d" % port]
        env = dict(os.environ, POD_NAME="flexvol-provisioner-scale", POD_NAMESPACE="kube-system")
        logf = open(os.path.join(tmp, "provisioner.log"), "wb")
        cgprocs = os.path.join(cg, "cgroup.procs")

        def enter_cgroup():
            with open(cgprocs, "w") as f:
                f.write("0")

        # the log through a pipe: its page cache is not charged to the provisioner's cgroup
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, env=env, preexec_fn=enter_cgroup)
        threading.Thread(target=lambda: [logf.write(b) for b in iter(
            lambda: p.stdout.read1(65536), b"")], daemon=True).start()
        t0 = time.monotonic()
        while True:
            if p.poll() is not None:
                raise RuntimeError("the provisioner exited (%s) before it was ready" % p.returncode)
            # a standby is ready too (/readyz): the leader, and then ready (its first list done)
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", "/metrics")
                r = c.getresponse()
                leader = b"\nflexvol_provisioner_leader 1" in r.read()
                c.request("GET", "/readyz")
                if leader and c.getresponse().status == 200:
                    break
            except (OSError, http.client.HTTPException):
                pass
            if time.monotonic() - t0 > 600:
                raise RuntimeError("the provisioner not ready within 600 s")
            time.sleep(0.2)
        res["ready_s"] = round(time.monotonic() - t0, 1)
        log("provisioner ready (listed, leader) in %.1f s; cgroup peak so far %.1f MiB" % (
            res["ready_s"], int(read(os.path.join(cg, peak_file))) / 2**20))

        # the audit log's stamps (RFC 3339 with microseconds) compare as strings
        start_wall = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        t_start = time.monotonic()
        res["load_at_claims"] = loadavg()
        took = create_many(url, ca, "bench", "c", a.claims, "flexvol-nfs")
        res["create_s"] = round(took, 1)
        log("%d flexvol/nfs claims created in %.1f s" % (a.claims, took))
        last_note = 0
        while True:
            with obs.lock:
                npv, nb, nh = len(obs.pvs), len(obs.bound), len(obs.handover)
            now = time.monotonic() - t_start
            if p.poll() is not None:
                fails.append("the provisioner exited (%s) at %.0f s (memory cgroup failcnt %s)"
                             % (p.returncode, now, read(os.path.join(cg, fail_file))))
                break
            if npv >= a.claims and nb >= a.claims:
                break
            if now > a.timeout:
                fails.append("not done within %.0f s: %d PVs, %d bound, %d handed over" % (
                    a.timeout, npv, nb, nh))
                break
            if 0 < nh and npv < a.claims:
                loads.append(loadavg())  # while the PVs are made
            if now - last_note >= 30:
                last_note = now
                log("%4.0f s: %d handed over, %d PVs, %d bound; provisioner VmHWM %d KiB, "
                    "cgroup peak %.1f MiB; load %.1f" % (
                        now, nh, npv, nb, vm_hwm_kib(p.pid),
                        int(read(os.path.join(cg, peak_file))) / 2**20, loadavg()))
            time.sleep(0.5)

        if p.poll() is None:
            res["cpu_s"] = round(proc_cpu_s(p.pid), 1)
            res["vmhwm_mib"] = round(vm_hwm_kib(p.pid) / 1024, 1)
        res["cgroup_peak_mib"] = round(int(read(os.path.join(cg, peak_file)) or 0) / 2**20, 1)
        with obs.lock:
            pv_t = sorted(t for t, _, _ in obs.pvs.values())
            ho = dict(obs.handover)
            bound = dict(obs.bound)
            pvs = dict(obs.pvs)
        per_claim = collections.Counter(uid for _, _, uid in pvs.values())
        res["pvs"] = len(pvs)
        res["bound"] = len(bound)
        res["handed_over"] = len(ho)
        if pv_t:
            res["last_pv_s"] = round(pv_t[-1] - t_start, 1)
        if ho:
            res["last_handover_s"] = round(max(t for t, _ in ho.values()) - t_start, 1)
        if bound:
            res["last_bound_s"] = round(max(bound.values()) - t_start, 1)
        if pv_t and ho:
            res["handover_to_last_pv_s"] = round(res["last_pv_s"] - res["last_handover_s"], 1)
            lat = sorted(pvs[n][0] - ho[u][0] for n, (_, _, u) in pvs.items() if u in ho)
            if lat:
                res["handover_to_pv_median_s"] = round(lat[len(lat) // 2], 2)
                res["handover_to_pv_max_s"] = round(lat[-1], 2)
        binder = sorted(bound[u] - t for t, _, u in pvs.values() if u in bound)
        if binder:
            res["pv_to_bound_median_s"] = round(binder[len(binder) // 2], 2)
            res["pv_to_bound_max_s"] = round(binder[-1], 2)
        early = [n for n, (_, rv, u) in pvs.items() if u not in ho or rv < ho[u][1]]
        twice = [u for u, n in per_claim.items() if n > 1]
        if early:
            fails.append("%d PVs made before their claim's hand-over (%s)" % (len(early), early[0]))
        if twice:
            fails.append("%d claims with two PVs (%s)" % (len(twice), twice[0]))
        dirs = [d for d in os.listdir(share) if not d.startswith(".")]
        res["directories"] = len(dirs)
        if loads:
            res["load_while_pvs_made"] = {"min": min(loads), "median": sorted(loads)[len(loads) // 2],
                                          "max": max(loads)}
        if p.poll() is None:
            kp.kill_pid(p)
        if os.path.exists(audit):
            time.sleep(2)  # batch mode: let the last events reach the file
            before, after = audit_counts(audit, start_wall)
            res["requests_startup"] = sum(before.values())
            res["requests_run"] = sum(after.values())
            res["requests_per_claim"] = round(sum(after.values()) / max(1, len(pvs)), 2)
            res["requests_by_kind"] = dict(after.most_common())
        log("requests by kind after the claims were created: %s" % res.get("requests_by_kind"))
        if os.path.exists(audit) and logf:
            logf.flush()
            try:
                res["breakdown"] = audit_breakdown(audit, logf.name)
                log("per claim, from the audit log (server times): %s" % json.dumps(
                    res["breakdown"], indent=1))
            except (OSError, ValueError, KeyError) as e:
                log("no per-claim breakdown: %s" % e)
        if res.get("handover_to_last_pv_s", 1e9) > a.target_s:
            fails.append("last hand-over to last PV %.1f s > %.0f s" % (
                res.get("handover_to_last_pv_s", float("nan")), a.target_s))
        if res["cgroup_peak_mib"] > a.peak_mib:
            fails.append("cgroup peak %.1f MiB > %.0f MiB" % (res["cgroup_peak_mib"], a.peak_mib))
    except (RuntimeError, TimeoutError) as e:
        fails.append(str(e))
        log("%s\n%s" % (e, server.logs()))
    finally:
        for w in watchers:
            w.stop = True
        if p is not None and p.poll() is None:
            kp.kill_pid(p)
        if logf:
            time.sleep(0.5)
            logf.close()
        server.close()
        if cg:
            try:
                os.rmdir(cg)
            except OSError as e:
                log("cgroup %s not removed: %s" % (cg, e))
    res["load_at_end"] = loadavg()
    res["failed"] = fails
    for f in fails:
        print("FAIL " + f)
    line = json.dumps(res, sort_keys=True)
    if a.json:
        with open(a.json, "w") as f:
            f.write(line + "\n")
    if not a.keep and not fails:
        subprocess.run(["rm", "-rf", tmp])
    else:
        log("logs kept in %s" % tmp)
    print(line)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
