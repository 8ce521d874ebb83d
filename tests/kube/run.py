#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The cluster lane: flexvol through a real single-node Kubernetes (tests/kube/cluster.py).

    python3 tests/kube/run.py [--images DIR] [-k SUBSTRING]... [--keep-going] [--list]

Each case is a function `case_<name>(t)` below, run in the order of CASES; a case asserts on real
state (the kernel's mounts and loop devices, pod logs, object status and events, the drivers' logs
of the kubelet side and of the controller-manager side). The last line is `N passed, N failed`.
A case named in KNOWN_FAILURES still runs; its failure is reported as "known failure" (and counted
as failed in CI unless it passes). See tests/kube/README.md to add a case.
"""
import base64
import json
import os
import re
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cluster as C  # noqa: E402

ROOT = C.ROOT
NS = "default"
BUSYBOX = "localhost/flexvol/busybox:kube-test"
INSTALLER = "localhost/flexvol/installer:kube-test"
INSTALLER_V2 = "localhost/flexvol/installer:kube-test-v2"
PLUGINS = C.p("plugins")
LOG_KUBELET = C.p("log", "kubelet-driver.log")
LOG_KCM = C.p("log", "kcm-driver.log")
LINE_RE = re.compile(r"^(\S+) flexvol-(\S+)\[(\d+)\] \S+: op=(\S+) volume=(\S*) status=(.*?) duration_ms=(\d+)(.*)$")

# Cases expected to fail on today's main, with the reason: they still run, a failure is reported
# as "known failure" and not counted (the run stays green), a pass is reported too (then remove
# the entry). Each entry names the issue that fixes it.
KNOWN_FAILURES = {}


# where a pod sees a claim of volumeMode Block (volumeDevices)
BLOCK_DEVICE = "/dev/xvda"


def as_block_device(container):
    """@container's one volume "data" given as the raw block device BLOCK_DEVICE, not mounted."""
    del container["volumeMounts"]
    container["volumeDevices"] = [{"name": "data", "devicePath": BLOCK_DEVICE}]


class CaseFailed(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise CaseFailed(msg)


# --- test context ----------------------------------------------------------------------------------

class T:
    def __init__(self, cl):
        self.cl = cl
        self.installed = None     # the overlay currently installed
        self.mode = None          # attach mode the cluster is in

    # kubectl
    def k(self, *args, **kw):
        return self.cl.kubectl(*args, **kw)

    def kj(self, *args, **kw):
        return self.cl.kjson(*args, **kw)

    def objs(self, path=None, text=None):
        """The objects of a manifest file (or text), as kubectl parses them (no YAML module)."""
        r = self.k("create", "--dry-run=client", "-o", "json", "-f", path or "-", input=text)
        dec, s, out = json.JSONDecoder(), r.stdout, []
        i = 0
        while True:
            while i < len(s) and s[i].isspace():
                i += 1
            if i >= len(s):
                break
            o, i = dec.raw_decode(s, i)
            out += o["items"] if o.get("kind") == "List" else [o]
        return out

    def apply(self, obj):
        return self.k("apply", "-f", "-", input=json.dumps(obj))

    def delete(self, kind, name, ns=NS, wait=True, timeout=120):
        args = ["delete", kind, name, "--ignore-not-found", f"--wait={'true' if wait else 'false'}",
                f"--timeout={timeout}s"]
        if ns:
            args += ["-n", ns]
        return self.k(*args, timeout=timeout + 30)

    # driver logs: list of dicts (time, driver, pid, op, volume, status, rest)
    def ops(self, which, since=0):
        path = LOG_KCM if which == "kcm" else LOG_KUBELET
        out = []
        try:
            with open(path, errors="replace") as f:
                f.seek(since)
                for line in f:
                    m = LINE_RE.match(line.rstrip("\n"))
                    if m:
                        out.append(dict(zip(("time", "driver", "pid", "op", "volume", "status", "rest"),
                                            m.groups())))
        except FileNotFoundError:
            pass
        return out

    def logpos(self):
        return {w: (os.path.getsize(p) if os.path.exists(p) else 0)
                for w, p in (("kcm", LOG_KCM), ("kubelet", LOG_KUBELET))}

    def wait_op(self, which, op, since, status="Success", timeout=120, driver="loop"):
        def found():
            return [o for o in self.ops(which, since[which])
                    if o["op"] == op and o["status"] == status and o["driver"] == driver]
        try:
            return C.wait_for(f"{op} {status} in the {which} driver log", found, timeout)
        except TimeoutError as e:
            seen = [(o["op"], o["status"]) for o in self.ops(which, since[which])]
            raise CaseFailed(f"{e}; calls seen there: {seen[-25:]}")

    # pods
    def pod(self, name, cmd, claim=None, read_only=False, fs_group=None, volumes=None, mounts=None,
            host_network=True, block=False):
        self.apply(self.pod_obj(name, cmd, claim, read_only, fs_group, volumes, mounts, host_network, block))

    @staticmethod
    def pod_obj(name, cmd, claim=None, read_only=False, fs_group=None, volumes=None, mounts=None,
                host_network=True, block=False):
        """The lane's busybox pod running cmd, its claim (if any) at /data, or with @block as the
        raw block device BLOCK_DEVICE."""
        spec = {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 2,
            "hostNetwork": host_network,
            "nodeName": None,
            "containers": [{"name": "app", "image": BUSYBOX, "imagePullPolicy": "Never",
                            "command": ["/bin/sh", "-c", cmd],
                            "volumeMounts": mounts if mounts is not None else
                            ([{"name": "data", "mountPath": "/data"}] if claim or volumes else [])}],
            "volumes": volumes if volumes is not None else
            ([{"name": "data", "persistentVolumeClaim": {"claimName": claim, "readOnly": read_only}}]
             if claim else []),
        }
        del spec["nodeName"]  # the scheduler places it (the operator's flow)
        if fs_group is not None:
            spec["securityContext"] = {"fsGroup": fs_group}
        if block:
            as_block_device(spec["containers"][0])
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}, "spec": spec}

    def pod_phase(self, name):
        return self.kj("get", "pod", name, "-n", NS).get("status", {}).get("phase")

    def wait_pod(self, name, phases=("Running",), timeout=180):
        def ok():
            ph = self.pod_phase(name)
            if ph in ("Failed",) and "Failed" not in phases:
                raise CaseFailed(f"pod {name} failed: {self.pod_debug(name)}")
            return ph in phases
        try:
            C.wait_for(f"pod {name} {'/'.join(phases)}", ok, timeout, 1)
        except TimeoutError as e:
            raise CaseFailed(f"{e}: {self.pod_debug(name)}")

    def pod_debug(self, name):
        r = self.k("get", "events", "-n", NS, "--field-selector", f"involvedObject.name={name}",
                   "-o", "custom-columns=REASON:.reason,MSG:.message", "--no-headers", check=False)
        return f"phase={self.pod_phase(name)}; events: {r.stdout.strip()[-1500:]}"

    def logs(self, name):
        return self.k("logs", name, "-n", NS).stdout

    def wait_log(self, name, text, timeout=60):
        try:
            return C.wait_for(f"'{text}' in the log of pod {name}",
                              lambda: text in self.logs(name) and self.logs(name), timeout, 1)
        except TimeoutError as e:
            raise CaseFailed(f"{e}: log: {self.k('logs', name, '-n', NS, check=False).stdout[-800:]}")

    def delete_pod(self, name):
        self.delete("pod", name)

    # loop volumes
    def loop_pv(self, name, file, size="64Mi", fs="ext4", secret=None, extra_opts=None):
        fv = {"driver": "flexvol/loop", "fsType": fs, "options": {"file": file, "size": size}}
        fv["options"].update(extra_opts or {})
        if secret:
            fv["secretRef"] = {"name": secret, "namespace": NS}
        self.apply({"apiVersion": "v1", "kind": "PersistentVolume",
                    "metadata": {"name": name},
                    "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                             "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                             "flexVolume": fv,
                             "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                                 {"key": "kubernetes.io/hostname", "operator": "In", "values": [C.NODE]}]}]}}}})
        self.apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {"name": name, "namespace": NS},
                    "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": name,
                             "resources": {"requests": {"storage": size}}}})
        C.wait_for(f"claim {name} Bound", lambda: self.kj("get", "pvc", name, "-n", NS)
                   ["status"].get("phase") == "Bound", 60)

    def chap_portal_listed(self, portal):
        """@portal added to the admission policy's chapPortals (ConfigMap
        kube-system/flexvol-policy, when the install has the policy), as an administrator lists a
        target that may receive CHAP credentials; returns the value to restore (None: no policy)."""
        r = self.k("-n", "kube-system", "get", "cm", "flexvol-policy", "-o", "json", check=False)
        if r.returncode != 0:
            return None
        old = json.loads(r.stdout).get("data", {}).get("chapPortals", "")
        new = ", ".join(p for p in (old.strip(), portal) if p)
        self.k("-n", "kube-system", "patch", "cm", "flexvol-policy", "--type=merge", "-p",
               json.dumps({"data": {"chapPortals": new}}))
        return old

    def chap_portals_restored(self, old):
        if old is not None:
            self.k("-n", "kube-system", "patch", "cm", "flexvol-policy", "--type=merge", "-p",
                   json.dumps({"data": {"chapPortals": old}}), check=False)

    def drop_pv(self, name):
        self.delete("pvc", name)
        self.delete("pv", name, ns=None)

    def backing(self, file):
        return os.path.join(C.p("flexvol", "loop"), file)

    def loops_of(self, file):
        """Loop devices bound to the backing file (from sysfs)."""
        want = self.backing(file)
        out = []
        for dev in os.listdir("/sys/block"):
            try:
                with open(f"/sys/block/{dev}/loop/backing_file") as f:
                    if f.read().strip() == want:
                        out.append("/dev/" + dev)
            except OSError:
                pass
        return out

    def mounts_of(self, devs):
        """Mount points (from the kernel's mountinfo) of any of the devices."""
        out = []
        with open("/proc/self/mountinfo") as f:
            for line in f:
                parts = line.split()
                src = parts[parts.index("-") + 2]
                if src in devs:
                    out.append((parts[4], parts[5].split(",")[0]))
        return out

    # the kubelet's own log (component log, -v=2)
    def kubelet_logpos(self):
        return os.path.getsize(C.p("logs", "kubelet.log"))

    def wait_kubelet_loaded(self, since, drivers, timeout=60):
        def loaded():
            with open(C.p("logs", "kubelet.log"), errors="replace") as f:
                f.seek(since)
                text = f.read()
            return all(f'"Loaded volume plugin" pluginName="flexvol/{d}"' in text for d in drivers)
        try:
            C.wait_for(f"the kubelet to load flexvol/{{{','.join(drivers)}}}", loaded, timeout)
        except TimeoutError as e:
            raise CaseFailed(str(e))

    # install
    def install(self, overlay):
        self.k("apply", "-k", os.path.join(HERE, "overlays", overlay), timeout=120)
        self.rollout()
        self.installed = overlay

    def rollout(self, timeout=180):
        # rollout status right after a create or an update may look at a status the controller
        # has not written yet (0 desired = "rolled out"): wait for it to observe this generation
        def observed():
            ds = self.kj("-n", "kube-system", "get", "ds", "flexvol-installer")
            st = ds.get("status", {})
            return (st.get("observedGeneration", 0) >= ds["metadata"]["generation"] and
                    st.get("desiredNumberScheduled", 0) >= 1)
        C.wait_for("the DaemonSet controller to observe the installer", observed, 60)
        r = self.k("-n", "kube-system", "rollout", "status", "ds/flexvol-installer", f"--timeout={timeout}s",
                   check=False, timeout=timeout + 30)
        if r.returncode != 0:
            pods = self.k("-n", "kube-system", "get", "pods", "-o", "wide", check=False).stdout
            ev = self.k("-n", "kube-system", "get", "events", "--sort-by=.lastTimestamp", check=False).stdout
            raise CaseFailed(f"rollout of the installer: {r.stderr.strip()}\n{pods}\n{ev[-2500:]}")

    def ensure_mode(self, mode):
        """controller: kubeadm overlay + KCM with the plugin dir; node: kubeadm-1.36 overlay +
        KCM without FlexVolume; kubelet restarted so that it re-probes init (attach capability)."""
        overlay = "kubeadm" if mode == "controller" else "kubeadm-1.36"
        if self.mode == mode and self.installed == overlay:
            return
        self.install(overlay)
        # the installer copies the node config when it starts (deploy/base/configmap.yaml:
        # "After editing, restart the installer")
        self.k("-n", "kube-system", "rollout", "restart", "ds/flexvol-installer")
        self.rollout()
        want = C.p("etc", "flexvol.conf")
        C.wait_for("node config with the mode", lambda: os.path.exists(want) and
                   (("\nattach_mode = node" in open(want).read()) == (mode == "node")), 60)
        pos = self.logpos()
        self.cl.restart_kcm(flex=(mode == "controller"))
        self.cl.restart_kubelet()
        self.wait_op("kubelet", "init", pos, timeout=60)  # re-probed: attach capability per mode
        self.mode = mode


# --- cases -----------------------------------------------------------------------------------------

OTHER_VENDOR = "othervendor~fake"


def plugin_tree():
    out = {}
    for dirpath, dirnames, files in os.walk(PLUGINS):
        for f in files:
            full = os.path.join(dirpath, f)
            with open(full, "rb") as fh:
                out[os.path.relpath(full, PLUGINS)] = (fh.read(), os.stat(full).st_mode & 0o7777)
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), PLUGINS) + "/"] = None
    return out


def case_install(t):
    """kubectl apply -k (the kubeadm overlay): the DaemonSet is Ready only once the drivers are in
    the kubelet's plugin dir; the kubelet and the controller-manager then probe them (init)."""
    # another vendor's driver, present before the install (uninstall must leave it alone)
    os.makedirs(os.path.join(PLUGINS, OTHER_VENDOR), exist_ok=True)
    fake = os.path.join(PLUGINS, OTHER_VENDOR, "fake")
    with open(fake, "w") as f:
        f.write('#!/bin/sh\ncase "$1" in init) echo \'{"status":"Success","capabilities":{"attach":false}}\';;'
                ' *) echo \'{"status":"Not supported"}\';; esac\n')
    os.chmod(fake, 0o755)
    t.before_install = plugin_tree()
    klog = t.kubelet_logpos()
    t0 = time.time()
    t.k("apply", "-k", os.path.join(HERE, "overlays", "kubeadm"))
    t.rollout()
    ready_at = time.time()
    t.installed = "kubeadm"
    t.mode = "controller"
    for drv in ("loop", "nfs", "iscsi"):
        f = os.path.join(PLUGINS, f"flexvol~{drv}", drv)
        check(os.path.isfile(f) and os.access(f, os.X_OK), f"{f} missing after rollout status")
        st = os.stat(f)
        check(st.st_mode & 0o777 == 0o555, f"{f} mode {oct(st.st_mode & 0o777)}")
        check(t0 - 1 <= st.st_mtime <= ready_at, f"{f} not written by this install (mtime)")
    check(os.path.exists(C.p("etc", "flexvol.conf")), "the node config was not installed")
    ds = t.kj("-n", "kube-system", "get", "ds", "flexvol-installer")
    check(ds["status"].get("numberReady") == 1, f"DaemonSet not ready: {ds['status']}")
    # the readiness came from the installer's ready file, written after the drivers
    pod = t.kj("-n", "kube-system", "get", "pods", "-l", "app.kubernetes.io/name=flexvol-installer")["items"][0]
    check(pod["spec"]["containers"][0]["image"] == INSTALLER, f"image {pod['spec']['containers'][0]['image']}")
    # the kubelet (watching its plugin dir) probes the new drivers: its own log says so
    t.wait_kubelet_loaded(klog, ("loop", "nfs", "iscsi"))


def _write_read_flow(t, mode, pv, file):
    """The common flow: a pod writes, is deleted, a second pod reads the data back."""
    t.loop_pv(pv, file)
    pos = t.logpos()
    t.pod(f"{pv}-writer", "id; echo hello-from-$(hostname) > /data/hello && sync && cat /data/hello "
          "&& stat -c 'gid=%g mode=%a' /data && echo WROTE; sleep 3600", claim=pv, fs_group=2345)
    t.wait_pod(f"{pv}-writer")
    log = t.wait_log(f"{pv}-writer", "WROTE")
    check("gid=2345" in log, f"fsGroup 2345 not applied to the volume root: {log}")
    devs = t.loops_of(file)
    check(len(devs) == 1, f"expected one loop device on {file}, found {devs}")
    ms = t.mounts_of(devs)
    check(any("/volumes/flexvol~loop/" in m[0] or "/volumes/flexvol/loop" in m[0] or "flexvol~loop" in m[0]
              for m in ms), f"no pod volume mount of {devs[0]}: {ms}")
    if mode == "controller":
        t.wait_op("kcm", "attach", pos)
        for op in ("waitforattach", "mountdevice", "mount"):
            t.wait_op("kubelet", op, pos)
        check(any("/plugins/kubernetes.io/flexvolume/" in m[0] for m in ms),
              f"no device (global) mount of {devs[0]}: {ms}")
    else:
        t.wait_op("kubelet", "mount", pos)
        bad = [o["op"] for o in t.ops("kubelet", pos["kubelet"]) + t.ops("kcm", pos["kcm"])
               if o["op"] in ("attach", "waitforattach", "mountdevice") and o["driver"] == "loop"]
        check(not bad, f"node mode, yet these were called: {bad}")
    pos = t.logpos()
    t.delete_pod(f"{pv}-writer")
    t.wait_op("kubelet", "unmount", pos)
    if mode == "controller":
        t.wait_op("kubelet", "unmountdevice", pos)
        t.wait_op("kcm", "detach", pos, timeout=180)
    C.wait_for(f"loop device of {file} released", lambda: not t.loops_of(file), 60)
    check(not t.mounts_of(devs), f"still mounted after the pod is gone: {t.mounts_of(devs)}")
    # a second pod reads it back
    t.pod(f"{pv}-reader", "cat /data/hello && echo READ", claim=pv)
    t.wait_pod(f"{pv}-reader", ("Succeeded",))
    log = t.logs(f"{pv}-reader")
    check("hello-from-" in log and "READ" in log, f"second pod did not read the data back: {log}")
    t.delete_pod(f"{pv}-reader")
    C.wait_for(f"loop device of {file} released", lambda: not t.loops_of(file), 120)


def case_loop_controller(t):
    """loop, controller attach mode: attach/detach by the controller-manager's attach/detach
    controller, waitforattach/mountdevice/mount by the kubelet; data survives pods; fsGroup."""
    t.ensure_mode("controller")
    _write_read_flow(t, "controller", "loop-ctl", "ctl.img")


def case_loop_controller_readonly(t):
    """A read-only claim mount: the pod cannot write, can read."""
    t.ensure_mode("controller")
    pv = "loop-ro"
    t.loop_pv(pv, "ro.img")
    t.pod("ro-seed", "echo seed > /data/seed && sync && echo SEEDED", claim=pv)
    t.wait_pod("ro-seed", ("Succeeded",))
    t.delete_pod("ro-seed")
    t.pod("ro-pod", "cat /data/seed; if out=$(touch /data/new 2>&1); then echo WRITABLE; else echo "
          "\"REFUSED $out\"; fi", claim=pv, read_only=True)
    t.wait_pod("ro-pod", ("Succeeded",))
    log = t.logs("ro-pod")
    check("seed" in log, f"read-only pod could not read: {log}")
    check("REFUSED" in log and "WRITABLE" not in log, f"read-only pod could write: {log}")
    check("Read-only file system" in log, f"unexpected error for the write: {log}")
    t.delete_pod("ro-pod")
    C.wait_for("loop device released", lambda: not t.loops_of("ro.img"), 120)
    t.drop_pv(pv)


SECRET_VALUE = "s3cr3t-never-in-a-log"


def case_loop_secret(t):
    """A PV with a secretRef: the Secret's type must be the driver's name (flexvol/loop); its
    values reach the driver (base64) and never a log."""
    t.ensure_mode("controller")
    t.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "loop-secret", "namespace": NS},
             "type": "flexvol/loop", "data": {"token": base64.b64encode(SECRET_VALUE.encode()).decode()}})
    pv = "loop-sec"
    t.loop_pv(pv, "sec.img", secret="loop-secret")
    t.pod("sec-pod", "echo ok > /data/f && cat /data/f && echo SECRET-OK", claim=pv)
    t.wait_pod("sec-pod", ("Succeeded",))
    check("SECRET-OK" in t.logs("sec-pod"), "pod with a Secret-referencing PV did not run")
    t.delete_pod("sec-pod")
    C.wait_for("loop device released", lambda: not t.loops_of("sec.img"), 120)
    for f in (LOG_KCM, LOG_KUBELET):
        with open(f, errors="replace") as fh:
            data = fh.read()
        check(SECRET_VALUE not in data and base64.b64encode(SECRET_VALUE.encode()).decode() not in data,
              f"the Secret's value is in {f}")
    # a Secret of another type is refused by the kubelet: the pod never starts
    t.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "loop-secret-opaque", "namespace": NS},
             "type": "Opaque", "data": {"token": "eA=="}})
    pv2 = "loop-sec2"
    t.loop_pv(pv2, "sec2.img", secret="loop-secret-opaque")
    t.pod("sec-pod2", "echo should-not-run", claim=pv2)

    def refused():
        ev = t.k("get", "events", "-n", NS, "--field-selector", "involvedObject.name=sec-pod2",
                 "-o", "jsonpath={.items[*].message}").stdout
        return "flexvol/loop" in ev and ("type" in ev.lower()) and ev
    try:
        ev = C.wait_for("a FailedMount event naming the Secret type", refused, 120, 2)
    except TimeoutError as e:
        raise CaseFailed(f"{e}: {t.pod_debug('sec-pod2')}")
    check(t.pod_phase("sec-pod2") == "Pending", f"pod with a wrong-typed Secret ran: {ev}")
    t.delete_pod("sec-pod2")
    t.drop_pv(pv)
    t.drop_pv(pv2)


def case_loop_mixed_ro_rw(t):
    """Issue 17 point 8: a read-only pod and a read-write pod of one volume on one node, at the
    same time, in both orders (kubelet calls waitforattach per pod with its readwrite)."""
    t.ensure_mode("controller")
    pv = "loop-mix"
    t.loop_pv(pv, "mix.img")
    try:
        for first, second in (("rw", "ro"), ("ro", "rw")):
            names = {}
            try:
                for kind in (first, second):
                    n = f"mix-{first}{second}-{kind}"
                    names[kind] = n
                    if kind == "rw":
                        t.pod(n, "echo rw > /data/rw && sync && echo RW-WROTE; sleep 3600", claim=pv)
                    else:
                        t.pod(n, "if touch /data/ro 2>/dev/null; then echo RO-WROTE; else echo RO-REFUSED; fi; "
                              "sleep 3600", claim=pv, read_only=True)
                    t.wait_pod(n, timeout=90)
                t.wait_log(names["rw"], "RW-WROTE")
                t.wait_log(names["ro"], "RO-REFUSED")
            finally:
                for n in names.values():
                    t.delete_pod(n)
                C.wait_for("loop device released", lambda: not t.loops_of("mix.img"), 180)
    finally:
        t.drop_pv(pv)


def case_loop_node(t):
    """loop, node attach mode (deploy/overlays/kubeadm-1.36, a controller-manager without
    FlexVolume, as kubeadm >= 1.36 runs it): mount and unmount alone do the node's work."""
    t.ensure_mode("node")
    init = [o for o in t.ops("kubelet") if o["op"] == "init" and o["driver"] == "loop"]
    check(init, "kubelet never probed loop")
    _write_read_flow(t, "node", "loop-node", "node.img")


def case_upgrade(t):
    """A new installer image rolls out while a pod keeps its volume mounted; the pod can still
    write, and its volume is unmounted by the new driver when it goes."""
    t.ensure_mode("node")
    pv = "loop-upg"
    t.loop_pv(pv, "upg.img")
    t.pod("upg-pod", "echo before > /data/f && echo BEFORE; sleep 3600", claim=pv)
    t.wait_pod("upg-pod")
    t.wait_log("upg-pod", "BEFORE")
    drv = os.path.join(PLUGINS, "flexvol~loop", "loop")
    with open(drv, "rb") as f:
        old = f.read()
    devs = t.loops_of("upg.img")
    mounts_before = t.mounts_of(devs)
    check(devs and mounts_before, "volume not mounted before the upgrade")
    pos = t.logpos()
    t.k("-n", "kube-system", "set", "image", "ds/flexvol-installer", f"install={INSTALLER_V2}")
    t.rollout()
    with open(drv, "rb") as f:
        new = f.read()
    check(new != old and new.endswith(b"flexvol-kube-upgrade-test\n"), "driver not replaced by the new image's")
    check(t.pod_phase("upg-pod") == "Running", "the pod did not survive the upgrade")
    check(t.mounts_of(devs) == mounts_before, f"mounts changed during the upgrade: {t.mounts_of(devs)}")
    t.wait_op("kubelet", "init", pos, timeout=60)  # kubelet re-probed the new file
    r = t.k("exec", "upg-pod", "-n", NS, "--", "/bin/sh", "-c", "echo after >> /data/f && cat /data/f", check=False)
    check(r.returncode == 0 and "after" in r.stdout, f"pod cannot write after the upgrade: {r.stdout} {r.stderr}")
    pos = t.logpos()
    t.delete_pod("upg-pod")
    t.wait_op("kubelet", "unmount", pos)
    C.wait_for("loop device released", lambda: not t.loops_of("upg.img"), 60)
    t.drop_pv(pv)
    # back to the first image, for the cases after this one
    t.k("-n", "kube-system", "set", "image", "ds/flexvol-installer", f"install={INSTALLER}")
    t.rollout()


def case_uninstall(t):
    """FLEXVOL_UNINSTALL=1, rollout, delete: the plugin dir is as it was before the install;
    the other vendor's driver is untouched."""
    t.k("-n", "kube-system", "set", "env", "ds/flexvol-installer", "FLEXVOL_UNINSTALL=1")
    t.rollout()
    t.k("delete", "-k", os.path.join(HERE, "overlays", t.installed or "kubeadm"), "--wait=true", timeout=120)
    t.installed = None
    t.mode = None
    after = plugin_tree()
    before = getattr(t, "before_install", None)
    check(before is not None, "case install did not run first")
    check(after == before, f"plugin dir differs from before the install: before {sorted(before)}, after {sorted(after)}")


def case_install_order(t):
    """What the install case saw made deterministic (no cluster needed): the kubelet may run a
    driver's init the moment the installer renames it into the plugin dir (the installer pod's
    own volume lookups process the plugin-dir events at once), so the node config, which decides
    init's answer (attach_mode), must already be in place then. deploy/install.sh runs with a
    `mv` on PATH that records, for every rename into the plugin dir, whether the config exists."""
    import tempfile
    with tempfile.TemporaryDirectory(prefix="flexvol-install-order.") as d:
        src = os.path.join(d, "src")
        os.makedirs(src)
        for drv in ("loop", "nfs"):
            with open(os.path.join(ROOT, "build", "image", "bin", drv), "rb") as f, \
                    open(os.path.join(src, drv), "wb") as g:
                g.write(f.read())
            os.chmod(os.path.join(src, drv), 0o755)
        conf = os.path.join(d, "flexvol.conf")
        with open(conf, "w") as f:
            f.write("attach_mode = node\n")
        dest = os.path.join(d, "etc", "flexvol.conf")
        plugins = os.path.join(d, "plugins")
        record = os.path.join(d, "record")
        fake = os.path.join(d, "fakebin")
        os.makedirs(fake)
        real_mv = subprocess.run(["sh", "-c", "command -v mv"], capture_output=True, text=True).stdout.strip()
        with open(os.path.join(fake, "mv"), "w") as f:
            f.write(f"""#!/bin/sh
for last; do :; done
case $last in {plugins}/*) if [ -e {dest} ]; then echo "$last config-present"; else echo "$last config-absent"; fi >> {record};; esac
exec {real_mv} "$@"
""")
        os.chmod(os.path.join(fake, "mv"), 0o755)
        env = dict(os.environ, PATH=f"{fake}:{os.environ.get('PATH', '/usr/bin:/bin')}")
        r = subprocess.run(["sh", os.path.join(ROOT, "deploy", "install.sh"), "--once", "--plugin-dir", plugins,
                            "--source", src, "--config", conf, "--config-dest", dest],
                           capture_output=True, text=True, env=env, timeout=60)
        check(r.returncode == 0, f"install.sh failed: {r.stdout} {r.stderr}")
        with open(record) as f:
            lines = f.read().split("\n")
        renames = [x for x in lines if x]
        check(len(renames) == 2, f"expected two driver renames, saw {renames}")
        absent = [x.split()[0] for x in renames if x.endswith("config-absent")]
        check(not absent, "drivers made visible to the kubelet before the node config was installed "
              f"(a probe then answers from the defaults, attach: true): {absent}")


def case_install_node_mode(t):
    """A fresh install with deploy/overlays/kubeadm-1.36 on a node whose kubelet keeps running
    (what an operator of a kubeadm >= 1.36 cluster does: no kubelet restart) and a
    controller-manager without FlexVolume: a loop pod must mount (the kubelet probes the
    drivers as they appear: it must then see attach:false)."""
    if t.installed:
        case_uninstall(t)
    t.cl.restart_kcm(flex=False)
    klog = t.kubelet_logpos()
    t.k("apply", "-k", os.path.join(HERE, "overlays", "kubeadm-1.36"))
    t.rollout()
    t.installed = "kubeadm-1.36"
    t.mode = "node"
    t.wait_kubelet_loaded(klog, ("loop",))
    pv = "loop-fresh"
    t.loop_pv(pv, "fresh.img")
    try:
        t.pod("fresh-pod", "echo ok > /data/f && echo FRESH-OK; sleep 3600", claim=pv)
        t.wait_pod("fresh-pod", timeout=90)
        t.wait_log("fresh-pod", "FRESH-OK")
    finally:
        t.delete_pod("fresh-pod")
        C.wait_for("loop device released", lambda: not t.loops_of("fresh.img"), 120)
        t.drop_pv(pv)


CASES = [case_install, case_loop_controller, case_loop_controller_readonly, case_loop_secret,
         case_loop_mixed_ro_rw, case_loop_node, case_upgrade]
# more cases register themselves here (provisioner, policy): see the modules imported below
LATE_CASES = [case_uninstall, case_install_node_mode, case_install_order]


def load_extra_cases():
    """tests/kube/cases_*.py: each defines CASES (a list of functions taking the context t)."""
    extra = []
    for f in sorted(os.listdir(HERE)):
        if f.startswith("cases_") and f.endswith(".py"):
            mod = __import__(f[:-3])
            extra += getattr(mod, "CASES", [])
            KNOWN_FAILURES.update(getattr(mod, "KNOWN_FAILURES", {}))
    return extra


def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", default=os.path.join(ROOT, "build", "kube-images"))
    ap.add_argument("-k", action="append", default=[], help="run only cases whose name contains this")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--keep", action="store_true", help="leave the cluster running at the end (debug)")
    ap.add_argument("--artifacts", default=os.path.join(ROOT, "build", "kube-logs"),
                    help="where the component and driver logs are copied before teardown")
    a = ap.parse_args()
    cases = CASES + load_extra_cases() + LATE_CASES
    if a.k:
        cases = [c for c in cases if any(k in c.__name__ for k in a.k)]
    if a.list:
        for c in cases:
            print(c.__name__[5:], "-", (c.__doc__ or "").strip().split("\n")[0])
        return 0
    bindir = os.environ.get("FLEXVOL_KUBE_BIN") or C.default_bindir()
    lock = C.take_lock()  # noqa: F841 - one cluster at a time; held until this process ends
    cl = C.Cluster(bindir)
    passed = failed = 0
    known = []
    t0 = time.monotonic()
    try:
        try:
            cl.up(a.images, "controller")
        except Exception as e:  # noqa: BLE001
            print(f"FAIL cluster-up: {e}")
            traceback.print_exc()
            failed += 1
            cases = []
        t = T(cl)
        for c in cases:
            name = c.__name__[5:]
            s = time.monotonic()
            try:
                if not name.startswith("install") and name != "uninstall" and t.installed is None:
                    t.install("kubeadm")
                    t.mode = "controller"
                c(t)
                print(f"ok   {name} ({time.monotonic() - s:.0f} s)", flush=True)
                if name in KNOWN_FAILURES:
                    print(f"note {name} is listed in KNOWN_FAILURES but passes: remove it from there")
                passed += 1
            except Exception as e:  # noqa: BLE001
                why = KNOWN_FAILURES.get(name)
                tag = f"FAIL {name} (known failure: {why})" if why else f"FAIL {name}"
                print(f"{tag} ({time.monotonic() - s:.0f} s): {e}", flush=True)
                if not isinstance(e, CaseFailed):
                    traceback.print_exc()
                if why:
                    known.append(name)
                else:
                    failed += 1
                reset_after_failure(t)
            C.record_container_ids(cl)
    finally:
        save_logs(a.artifacts)
        if a.keep:
            print("cluster left running (--keep): python3 tests/kube/cluster.py down")
        else:
            try:
                cl.down()
            except Exception as e:  # noqa: BLE001
                print(f"FAIL teardown: {e}")
                failed += 1
            left = leftovers(bindir)
            if left:
                print(f"FAIL teardown left: {left}")
                failed += 1
    print(f"cluster lane: {time.monotonic() - t0:.0f} s" + (f"; known failures (not counted): {', '.join(known)}"
                                                             if known else ""))
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


def reset_after_failure(t):
    """A failed case may leave pods, claims and volumes behind: remove the test namespace's pods
    and claims and the PVs the cases made, so that the next case starts from an idle node."""
    t.k("delete", "pods", "--all", "-n", NS, "--grace-period=1", "--timeout=60s", check=False, timeout=90)
    t.k("delete", "pvc", "--all", "-n", NS, "--wait=false", check=False)
    for pv in t.kj("get", "pv")["items"]:
        if (pv["spec"].get("flexVolume") or {}).get("driver") == "flexvol/loop":
            t.k("delete", "pv", pv["metadata"]["name"], "--wait=false", check=False)


def save_logs(dest):
    """The components' logs and both sides' driver logs, kept after teardown (CI debugging)."""
    import shutil
    shutil.rmtree(dest, ignore_errors=True)
    for sub in ("logs", "log"):
        src = C.p(sub)
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(dest, sub), dirs_exist_ok=True)
    if os.path.isdir(dest):
        print(f"logs kept in {dest}")


def leftovers(bindir):
    """What the lane must never leave: our processes, mounts, loop devices, dirs, cgroups."""
    left = []
    for e in os.listdir("/proc"):
        exe = C.proc_exe(int(e)) if e.isdigit() else None
        if exe and exe.startswith(bindir.rstrip("/") + "/"):
            left.append(f"process {e} ({exe})")
    left += [d for d in C.cgroup_parents() if os.path.isdir(d)]
    if os.path.exists(C.BASE) or os.path.exists(C.RUN):
        left.append("state dirs")
    if C.mounts_under([C.BASE, C.RUN]):
        left.append("mounts")
    left += [f"{dev} ({back})" for dev, back in C.our_loops()]
    return left


if __name__ == "__main__":
    sys.exit(main())
