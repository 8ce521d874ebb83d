# SPDX-License-Identifier: Apache-2.0
"""Cluster-lane cases on a second node: the VM lane's guest (tests/vm/run), whose kernel has the
NFS client and server and the iSCSI initiator and target this host's kernel lacks, joined to the
lane's control plane as a real node (issue 25).

    make check-kube-vm      (FLEXVOL_KUBE_VMNODE=1 python3 tests/kube/run.py -k vmnode)

The guest gets QEMU's user-mode network (`tests/vm/run --nic user,...`: no bridge, no tap, nothing
owned by root on the host): its kubelet reaches the API server at 10.0.2.2:6443 (QEMU's gateway
is the host's 127.0.0.1; the API server's certificate names 10.0.2.2), and QEMU forwards the
host's 127.0.0.1:VM_PORT to the kubelet's port in the guest, so that the API server reaches it for
logs and exec. The kubelet runs with --cloud-provider=external and this lane plays the cloud
controller: it sets the node's only address (InternalIP 127.0.0.1, the forwarded port's end; the
API server prefers Hostname, then InternalIP) and removes the uninitialized taint; the node keeps
its own name, label (flexvol.test/vm-node) and taint (flexvol.test/vm-node:NoSchedule: only pods
that tolerate it, the installer DaemonSet and these cases' pods, run there). In the guest:
tests/kube/vmnode_guest.py (the VM lane's NFS server and iSCSI target, containerd, the kubelet,
and a small request server through files in the shared workspace, which these cases use to
look at the guest's real state: its mount table, /sys/block, open-iscsi's sessions and node
records, the LUN's persistent reservation).
"""
import atexit
import base64
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

import cases_provisioner as P
import cluster as C
import e2e_suites as E2E
from run import BUSYBOX, INSTALLER, LINE_RE, LOG_KCM, NS, CaseFailed, as_block_device, check

sys.path.insert(0, os.path.join(C.ROOT, "tests", "vm"))
from iscsi_driver import pr_key  # noqa: E402 - the driver's reservation key of an initiator name

NAME = "flexvol-vm-1"
VM_PORT = 10350                      # the guest kubelet's port, forwarded from the host's 127.0.0.1
TAINT = "flexvol.test/vm-node"
VM_MEM = os.environ.get("FLEXVOL_KUBE_VM_MEM", "2048")
NFS_SERVER = "127.0.0.1"             # the VM lane's fixtures, inside the guest (tests/vm/fixtures)
NFS_EXPORT = "/srv/flexvol/nfs"
PORTAL = "127.0.0.1:3260"
IQN1 = "iqn.2024-01.io.flexvol.test:target1"
IQN2 = "iqn.2024-01.io.flexvol.test:target2-chap"
CHAP_USER, CHAP_SECRET = "flexvol-user", "flexvol-secret1"
INITIATOR = "iqn.2024-01.io.flexvol.test:initiator-vm"
GUEST_DRIVER_LOG = C.p("log", "kubelet-driver.log")   # inside the guest (its BASE is a tmpfs)

GUEST = None  # the running guest (one per run)


def log(msg):
    print(f"vmnode: {msg}", flush=True)


# --- the guest -------------------------------------------------------------------------------------

class Guest:
    def __init__(self, cl, name=NAME, port=VM_PORT, initiator=INITIATOR):
        self.cl = cl
        self.name = name
        self.port = port
        self.initiator = initiator    # its own iSCSI identity, so its own reservation key
        self.dir = os.path.join(C.ROOT, "build", "kube-vmnode", name)
        self.seq = 0
        self.proc = None
        self.times = {}

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    # -- preparation on the host: certificates, kubeconfig, configs (BASE's layout, in the guest)
    def prepare(self, images_dir):
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.path("base", "pki"), mode=0o700)
        os.makedirs(self.path("logs"))
        os.makedirs(self.path("rpc"))
        os.chmod(self.dir, 0o700)
        ca, pki = C.p("pki"), self.path("base", "pki")
        shutil.copy(os.path.join(ca, "ca.crt"), pki)
        self.cert("kubelet", f"/O=system:nodes/CN=system:node:{self.name}", "clientAuth")
        self.cert("kubelet-serving", f"/CN={self.name}", "serverAuth",
                  f"DNS:{self.name},IP:127.0.0.1,IP:10.0.2.15")
        k = C.p("pki")
        C.write(self.path("base", "kubelet.kubeconfig"), f"""apiVersion: v1
kind: Config
clusters:
- name: flexvol-kube
  cluster:
    server: https://10.0.2.2:6443
    certificate-authority: {k}/ca.crt
users:
- name: kubelet
  user:
    client-certificate: {k}/kubelet.crt
    client-key: {k}/kubelet.key
contexts:
- name: flexvol-kube
  context: {{cluster: flexvol-kube, user: kubelet}}
current-context: flexvol-kube
""", 0o600)
        C.write(self.path("base", "kubelet", "config.yaml"), C.kubelet_config("0.0.0.0", self.port, f"""\
registerWithTaints:
- key: {TAINT}
  value: "true"
  effect: NoSchedule
"""))
        C.write(self.path("base", "containerd", "config.toml"), C.containerd_config())
        C.write(self.path("base", "cni", "net.d", "10-flexvol-kube.conflist"), C.cni_config() + "\n")
        env = dict(self.cl.driver_env, FLEXVOL_LOG_FILE=GUEST_DRIVER_LOG)
        C.write(self.path("node.json"), json.dumps({
            "name": self.name, "base": C.BASE, "run": C.RUN, "bin": self.cl.bin,
            "images": [os.path.join(images_dir, x) for x in ("pause.tar", "busybox.tar", "installer.tar") +
                       (CSI_IMAGES if os.environ.get("FLEXVOL_KUBE_VMNODE_CSI") == "1" else ())],
            "dirs": ["log", "flexvol/loop", "flexvol/state", "etc", "plugins"],
            "driver_env": env, "healthz_port": 10248,
            "fixtures_env": {"FLEXVOL_VM_INITIATOR": self.initiator},
            "kubelet_args": [f"--kubeconfig={C.p('kubelet.kubeconfig')}", f"--config={C.p('kubelet', 'config.yaml')}",
                             f"--root-dir={C.p('kubelet')}", f"--hostname-override={self.name}",
                             "--cloud-provider=external", f"--node-labels={TAINT}=true", "--v=2"],
        }, indent=1) + "\n")

    def cert(self, name, subj, usage, san=None):
        ca, d = C.p("pki"), self.path("base", "pki")
        C.sh(["openssl", "genrsa", "-out", f"{d}/{name}.key", "2048"])
        C.sh(["openssl", "req", "-new", "-key", f"{d}/{name}.key", "-subj", subj, "-out", f"{d}/{name}.csr"])
        ext = f"basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage={usage}\n"
        if san:
            ext += f"subjectAltName={san}\n"
        C.write(f"{d}/{name}.ext", ext)
        C.sh(["openssl", "x509", "-req", "-in", f"{d}/{name}.csr", "-CA", f"{ca}/ca.crt", "-CAkey", f"{ca}/ca.key",
              "-CAcreateserial", "-CAserial", f"{d}/ca.srl", "-days", "3", "-extfile", f"{d}/{name}.ext",
              "-out", f"{d}/{name}.crt"])

    # -- boot and join
    def boot(self):
        argv = [os.path.join(C.ROOT, "tests", "vm", "run"), "--nic",
                f"user,hostfwd=tcp:127.0.0.1:{self.port}-:{self.port}", "--hostname", self.name,
                "--mem", VM_MEM, "--smp", "2", "--timeout", "7200", C.ROOT, "--",
                "/usr/bin/python3", "tests/kube/vmnode_guest.py", self.dir]
        self.console = open(self.path("logs", "console.log"), "ab")
        self.t_boot = time.monotonic()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.console,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def console_tail(self, n=25):
        try:
            with open(self.path("logs", "console.log"), errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def wait_up(self, timeout=900):
        st = self.path("status")

        def up():
            if not self.running():
                raise CaseFailed(f"the guest stopped (exit {self.proc.returncode}):\n{self.console_tail()}")
            if not os.path.exists(st):
                return False
            with open(st) as f:
                s = json.load(f)
            if s["state"] != "up":
                raise CaseFailed(f"the guest node did not come up: {s.get('error')}\n{self.console_tail()}")
            return s
        s = C.wait_for("the guest's containerd and kubelet", up, timeout, 1)
        self.times.update({f"guest {k}": v for k, v in s["times"].items()})
        self.times["guest uptime when up"] = round(s["uptime"], 1)
        self.times["boot to kubelet up (host wall)"] = round(time.monotonic() - self.t_boot, 1)

    def join(self, timeout=600):
        """Play the cloud controller for the node the kubelet registered (--cloud-provider=external):
        its address, the end of the forwarded port; the uninitialized taint removed."""
        C.wait_for(f"node {self.name} registered", lambda: self.cl.kubectl(
            "get", "node", self.name, check=False).returncode == 0, timeout, 1)
        self.times["boot to node registered"] = round(time.monotonic() - self.t_boot, 1)
        self.cl.kubectl("patch", "node", self.name, "--subresource=status", "--type=merge", "-p", json.dumps(
            {"status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]}}))
        self.cl.kubectl("taint", "node", self.name, "node.cloudprovider.kubernetes.io/uninitialized-", check=False)

        def ready():
            if not self.running():
                raise CaseFailed(f"the guest stopped:\n{self.console_tail()}")
            n = self.cl.kjson("get", "node", self.name)
            return any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))
        C.wait_for(f"node {self.name} Ready", ready, timeout, 1)
        self.times["boot to node Ready"] = round(time.monotonic() - self.t_boot, 1)

    # -- requests to the guest (tests/kube/vmnode_guest.py serves them)
    def rpc(self, req, timeout=180):
        if not self.running():
            raise CaseFailed(f"the guest is not running:\n{self.console_tail()}")
        self.seq += 1
        n = self.seq
        tmp, path, res = (self.path("rpc", f"{n}.{x}") for x in ("tmp", "req", "res"))
        with open(tmp, "w") as f:
            json.dump(req, f)
        os.rename(tmp, path)
        end = time.monotonic() + timeout
        while not os.path.exists(res):
            if time.monotonic() > end or not self.running():
                raise CaseFailed(f"no answer from the guest to {req} within {timeout} s")
            time.sleep(0.05)
        with open(res) as f:
            out = json.load(f)
        os.unlink(res)
        return out

    def sh(self, *argv, check_rc=True, timeout=120, input=None):
        r = self.rpc({"argv": list(argv), "timeout": timeout, "input": input}, timeout + 60)
        if check_rc and r["rc"] != 0:
            raise CaseFailed(f"in the guest: {' '.join(argv)}: exit {r['rc']}: {r.get('stderr', '').strip()[-1500:]}")
        return r

    def read(self, path, offset=0):
        r = self.rpc({"op": "read", "path": path, "offset": offset})
        if r["rc"] != 0:
            raise CaseFailed(f"in the guest: read {path}: {r.get('stderr')}")
        return r["stdout"], r["size"]

    # -- the guest's state
    def mounts(self):
        """(mount point, fs type, source, mount options + superblock options) of every mount"""
        out = []
        for line in self.read("/proc/self/mountinfo")[0].splitlines():
            parts = line.split()
            i = parts.index("-")
            out.append((parts[4], parts[i + 1], parts[i + 2], parts[5] + "," + parts[i + 3]))
        return out

    def mounts_under(self, prefix):
        return [m for m in self.mounts() if m[0].startswith(prefix)]

    def sessions(self):
        r = self.sh("iscsiadm", "-m", "session", check_rc=False)
        return [] if r["rc"] == 21 else [ln for ln in r["stdout"].splitlines() if ln.strip()]

    def node_records(self):
        r = self.sh("sh", "-c", "ls /etc/iscsi/nodes 2>/dev/null || true")
        return r["stdout"].split()

    portal = PORTAL  # the target's portal as the guest reaches it (udev's by-path names)

    def lun_disk(self, iqn, lun=1):
        r = self.sh("readlink", "-f", f"/dev/disk/by-path/ip-{self.portal}-iscsi-{iqn}-lun-{lun}",
                    check_rc=False)
        d = r["stdout"].strip()
        return d if r["rc"] == 0 and d.startswith("/dev/sd") else None

    def disk_mounts(self, dev):
        return sorted(m[0] for m in self.mounts() if dev and m[2] == dev)

    def pr_state(self, dev):
        """(registered keys, (holder key, type) or None) of a LUN, as sg_persist reads them"""
        keys = self.sh("sg_persist", "--in", "-k", dev)["stdout"]
        res = self.sh("sg_persist", "--in", "-r", dev)["stdout"]
        ks = sorted(int(x, 16) for x in re.findall(r"^\s+(0x[0-9a-fA-F]+)\s*$", keys, re.M))
        m = re.search(r"Key=(0x[0-9a-fA-F]+)\s*\n\s*scope: (\S+),\s+type: (.*)", res)
        return ks, ((int(m.group(1), 16), m.group(3).strip()) if m else None)

    # the guest kubelet's driver log
    def logpos(self):
        r = self.sh("sh", "-c", f"stat -c %s {GUEST_DRIVER_LOG} 2>/dev/null || echo 0")
        return int(r["stdout"].strip() or 0)

    def ops(self, since=0):
        text, _ = self.read(GUEST_DRIVER_LOG, since)
        out = []
        for line in text.splitlines():
            m = LINE_RE.match(line)
            if m:
                out.append(dict(zip(("time", "driver", "pid", "op", "volume", "status", "rest"), m.groups())))
        return out

    def wait_op(self, op, since, driver, status="Success", timeout=300):
        def found():
            return [o for o in self.ops(since) if o["op"] == op and o["status"] == status and o["driver"] == driver]
        try:
            return C.wait_for(f"{op} {status} in the guest's driver log", found, timeout, 1)
        except TimeoutError as e:
            seen = [(o["op"], o["status"]) for o in self.ops(since)]
            raise CaseFailed(f"{e}; calls seen there: {seen[-25:]}")

    def kubelet_log(self):
        try:
            with open(self.path("logs", "kubelet.log"), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    # -- teardown
    def stop(self):
        """Pods on the node deleted (the kubelet unmounts through the drivers), then the guest's
        own teardown (kubelet, containerd, what is left checked), the guest powered off, the
        Node object deleted. Returns what the guest found left behind."""
        report = {}
        if self.running():
            r = self.cl.kubectl("get", "pods", "-A", "--field-selector", f"spec.nodeName={self.name}", "-o", "json",
                                check=False)
            for p in (json.loads(r.stdout)["items"] if r.returncode == 0 else []):
                if p["metadata"].get("ownerReferences", [{}])[0].get("kind") != "DaemonSet":
                    self.cl.kubectl("delete", "pod", "-n", p["metadata"]["namespace"], p["metadata"]["name"],
                                    "--grace-period=2", "--timeout=120s", check=False, timeout=150)
            try:
                report = self.rpc({"op": "stop"}, 300).get("report", {})
            except CaseFailed as e:
                report = {"stop": str(e)}
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                report["guest"] = "did not power off within 120 s: stopped"
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, 15)   # tests/vm/run stops qemu and removes its temp dir
            self.proc.wait(60)
        self.cl.kubectl("delete", "node", self.name, "--ignore-not-found", check=False)
        self.cl.kubectl("delete", "pods", "-A", "--field-selector", f"spec.nodeName={self.name}", "--force",
                        "--grace-period=0", check=False)
        shutil.rmtree(self.path("base"), ignore_errors=True)    # the node's private keys
        shutil.rmtree(self.path("rpc"), ignore_errors=True)
        for f in ("status", "node.json"):
            if os.path.exists(self.path(f)):
                os.unlink(self.path(f))
        return report


def _stop_at_exit():
    if GUEST is not None and GUEST.running():
        log("stopping the guest left running")
        GUEST.stop()


atexit.register(_stop_at_exit)


def guest():
    if GUEST is None or not GUEST.running():
        raise CaseFailed("no guest node (case vmnode_join did not run or failed)")
    return GUEST


# --- objects ---------------------------------------------------------------------------------------

def vpod(t, g, name, cmd, claim=None, read_only=False, sub_path=None, security=None, block=False):
    """a busybox pod on the guest node (its node selector and the node's taint tolerated);
    @claim: one claim mounted at /data, or a list of claims, each at /data/<claim>;
    @security: the pod's securityContext; @block: the one claim is the raw block device
    /dev/xvda (volumeDevices)"""
    one = isinstance(claim, str)
    claims = [claim] if one else list(claim or [])
    names = ["data"] if one else [f"data-{i}" for i in range(len(claims))]
    mounts = [{"name": v, "mountPath": "/data" if one else f"/data/{c}"} for v, c in zip(names, claims)]
    if sub_path:
        mounts[0]["subPath"] = sub_path
    spec = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 2, "hostNetwork": True,
            "nodeSelector": {"kubernetes.io/hostname": g.name},
            "tolerations": [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "app", "image": BUSYBOX, "imagePullPolicy": "Never",
                            "command": ["/bin/sh", "-c", cmd], "volumeMounts": mounts}],
            "volumes": [{"name": v, "persistentVolumeClaim": {"claimName": c, "readOnly": read_only}}
                        for v, c in zip(names, claims)]}
    if security:
        spec["securityContext"] = security
    if block:
        as_block_device(spec["containers"][0])
    t.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}, "spec": spec})


def pod_uid(t, name):
    return t.kj("get", "pod", name, "-n", NS)["metadata"]["uid"]


def pod_volume_dir(t, name, driver, pv):
    return C.p("kubelet", "pods", pod_uid(t, name), "volumes", f"flexvol~{driver}", pv)


def flex_pv(t, name, driver, options, access, fs=None, secret=None, size="64Mi"):
    fv = {"driver": f"flexvol/{driver}", "options": options}
    if fs:
        fv["fsType"] = fs
    if secret:
        fv["secretRef"] = {"name": secret, "namespace": NS}
    t.apply({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
             "spec": {"capacity": {"storage": size}, "accessModes": [access],
                      "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "", "flexVolume": fv}})
    t.apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": NS},
             "spec": {"accessModes": [access], "storageClassName": "", "volumeName": name,
                      "resources": {"requests": {"storage": size}}}})
    C.wait_for(f"claim {name} Bound", lambda: t.kj("get", "pvc", name, "-n", NS)["status"].get("phase") == "Bound", 60)


def run_pod(t, g, name, cmd, claim, marker, **kw):
    vpod(t, g, name, cmd, claim, **kw)
    t.wait_pod(name, phases=("Running", "Succeeded"), timeout=300)
    t.wait_log(name, marker, timeout=120)


def delete_pods(t, *names):
    for n in names:
        t.k("delete", "pod", n, "-n", NS, "--ignore-not-found", "--wait=false")
    for n in names:
        t.delete_pod(n)


# --- cases -----------------------------------------------------------------------------------------

def case_vmnode_join(t):
    """The guest boots with QEMU's user-mode network, its kubelet and containerd join the control
    plane over TLS through 10.0.2.2, the node registers with its name, label and taint and becomes
    Ready; the installer DaemonSet puts the drivers on it (the guest kubelet loads flexvol/nfs and
    iscsi); the API server reaches the guest's kubelet for logs and exec through the forwarded
    port. Prints how long each step took."""
    global GUEST
    if GUEST is not None:
        GUEST.stop()
    images = os.environ.get("FLEXVOL_KUBE_IMAGES", os.path.join(C.ROOT, "build", "kube-images"))
    g = Guest(t.cl)
    g.prepare(images)
    GUEST = g
    g.boot()
    g.wait_up()
    g.join()
    n = t.kj("get", "node", g.name)
    check(n["metadata"]["labels"].get(TAINT) == "true", f"label {TAINT} missing: {n['metadata']['labels']}")
    check(n["metadata"]["labels"].get("kubernetes.io/hostname") == g.name, "hostname label")
    # (the node lifecycle controller's node.kubernetes.io/not-ready may still be going)
    taints = {(x["key"], x["effect"]) for x in n["spec"].get("taints", [])
              if not x["key"].startswith("node.kubernetes.io/")}
    check(taints == {(TAINT, "NoSchedule")}, f"taints {taints}")
    check(n["status"]["nodeInfo"]["kernelVersion"] != os.uname().release,
          f"the node runs the host's kernel {os.uname().release}?")
    check(n["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == g.port, "kubelet endpoint port")
    # the installer's pod on the new node, and the drivers it puts there
    t.rollout(timeout=600)
    g.times["boot to drivers installed"] = round(time.monotonic() - g.t_boot, 1)
    C.wait_for("the guest kubelet to load flexvol/nfs and flexvol/iscsi", lambda: all(
        f'"Loaded volume plugin" pluginName="flexvol/{d}"' in g.kubelet_log() for d in ("nfs", "iscsi")), 180, 1)
    ds_pod = [p for p in t.kj("get", "pods", "-n", "kube-system", "--field-selector",
                             f"spec.nodeName={g.name}")["items"]]
    check(len(ds_pod) == 1, f"pods on the guest node: {[p['metadata']['name'] for p in ds_pod]}")
    # logs and exec: the API server to the guest's kubelet, through QEMU's forwarded port
    r = t.k("logs", "-n", "kube-system", ds_pod[0]["metadata"]["name"], "-c", "install", check=False)
    check(r.returncode == 0 and r.stdout.strip(), f"kubectl logs of the guest's installer pod: {r.stderr}")
    vpod(t, g, "vm-hello", "echo HELLO-FROM-$(cat /proc/sys/kernel/hostname); sleep 3600")
    try:
        t.wait_pod("vm-hello", timeout=300)
        t.wait_log("vm-hello", f"HELLO-FROM-{g.name}")
        r = t.k("exec", "vm-hello", "-n", NS, "--", "cat", "/proc/sys/kernel/osrelease", check=False)
        check(r.returncode == 0 and r.stdout.strip() == n["status"]["nodeInfo"]["kernelVersion"],
              f"kubectl exec on the guest node: {r.stdout} {r.stderr}")
        # the taint: a pod without the toleration is not placed there (the host node has room)
        t.pod("vm-untolerated", "sleep 3600")
        t.wait_pod("vm-untolerated", timeout=120)
        check(t.kj("get", "pod", "vm-untolerated", "-n", NS)["spec"]["nodeName"] == C.NODE,
              "a pod without the toleration landed on the guest node")
    finally:
        delete_pods(t, "vm-hello", "vm-untolerated")
    log("times (s): " + ", ".join(f"{k} {v}" for k, v in g.times.items()))


def _nfs_opts(vers, **kw):
    o = {"server": NFS_SERVER, "share": NFS_EXPORT, "nfsVersion": vers}
    o.update(kw)
    return o


def _nfs_mount_of(g, d):
    m = [x for x in g.mounts() if x[0] == d]
    return m[0] if m else None


def case_vmnode_nfs_v3_rwx(t):
    """NFSv3, ReadWriteMany: two pods on the volume at once; each sees the other's file; in the
    guest's mount table two nfs mounts (vers=3) of the export, one per pod dir; both gone after
    the pods, the files on the server's export."""
    g = guest()
    pv = "vm-nfs3"
    flex_pv(t, pv, "nfs", _nfs_opts("3"), "ReadWriteMany")
    try:
        cmd = ("echo from-$POD > /data/$POD && echo WROTE; "
               "i=0; while [ $i -lt 120 ] && [ ! -f /data/$PEER ]; do sleep 1; i=$((i+1)); done; "
               "cat /data/$PEER; sleep 3600")
        vpod(t, g, "vm-nfs3-a", cmd.replace("$POD", "a").replace("$PEER", "b"), pv)
        vpod(t, g, "vm-nfs3-b", cmd.replace("$POD", "b").replace("$PEER", "a"), pv)
        t.wait_pod("vm-nfs3-a", timeout=300)
        t.wait_pod("vm-nfs3-b", timeout=300)
        dirs = [pod_volume_dir(t, p, "nfs", pv) for p in ("vm-nfs3-a", "vm-nfs3-b")]
        for d in dirs:
            m = _nfs_mount_of(g, d)
            check(m is not None, f"no mount at {d} in the guest")
            check(m[1] == "nfs" and m[2] == f"{NFS_SERVER}:{NFS_EXPORT}" and "vers=3" in m[3],
                  f"mount at {d}: {m}")
        t.wait_log("vm-nfs3-a", "from-b", 180)
        t.wait_log("vm-nfs3-b", "from-a", 180)
        srv = g.sh("cat", f"{NFS_EXPORT}/a", f"{NFS_EXPORT}/b")["stdout"]
        check(srv == "from-a\nfrom-b\n", f"the server's export holds {srv!r}")
    finally:
        delete_pods(t, "vm-nfs3-a", "vm-nfs3-b")
        t.drop_pv(pv)
    left = [m for m in g.mounts() if m[1] in ("nfs", "nfs4")]
    check(not left, f"nfs mounts left in the guest: {left}")
    g.sh("rm", "-f", f"{NFS_EXPORT}/a", f"{NFS_EXPORT}/b")


def case_vmnode_nfs_v42(t):
    """NFSv4.2: a pod writes and ends, a second pod reads the file back; the mount is nfs4 with
    vers=4.2 while each pod runs and gone after it."""
    g = guest()
    pv = "vm-nfs42"
    flex_pv(t, pv, "nfs", _nfs_opts("4.2"), "ReadWriteOnce")
    try:
        vpod(t, g, "vm-nfs42-w", "echo v42-data > /data/f && sync && echo WROTE && sleep 3600", pv)
        t.wait_pod("vm-nfs42-w", timeout=300)
        t.wait_log("vm-nfs42-w", "WROTE")
        d = pod_volume_dir(t, "vm-nfs42-w", "nfs", pv)
        m = _nfs_mount_of(g, d)
        check(m is not None and m[1] == "nfs4" and "vers=4.2" in m[3] and m[2] == f"{NFS_SERVER}:{NFS_EXPORT}",
              f"mount at {d}: {m}")
        delete_pods(t, "vm-nfs42-w")
        check(_nfs_mount_of(g, d) is None, f"{d} still mounted after the pod")
        run_pod(t, g, "vm-nfs42-r", "cat /data/f", pv, "v42-data")
    finally:
        delete_pods(t, "vm-nfs42-w", "vm-nfs42-r")
        t.drop_pv(pv)
        g.sh("rm", "-f", f"{NFS_EXPORT}/f")
    left = [m for m in g.mounts() if m[1] in ("nfs", "nfs4")]
    check(not left, f"nfs mounts left in the guest: {left}")


def case_vmnode_nfs_readonly(t):
    """A read-only claim: the mount in the guest is ro, the pod reads and its write fails with
    "Read-only file system"; nothing written on the server."""
    g = guest()
    pv = "vm-nfs-ro"
    g.sh("sh", "-c", f"echo ro-data > {NFS_EXPORT}/ro-f")
    flex_pv(t, pv, "nfs", _nfs_opts("4.2"), "ReadWriteMany")
    try:
        run_pod(t, g, "vm-nfs-ro", "cat /data/ro-f; echo x > /data/new 2>&1 || echo WRITE-REFUSED; sleep 3600", pv,
                "WRITE-REFUSED", read_only=True)
        out = t.logs("vm-nfs-ro")
        check("ro-data" in out and "Read-only file system" in out, f"pod log: {out!r}")
        m = _nfs_mount_of(g, pod_volume_dir(t, "vm-nfs-ro", "nfs", pv))
        check(m is not None and "ro" in m[3].split(",")[:1], f"read-only mount in the guest: {m}")
        check(g.sh("test", "-e", f"{NFS_EXPORT}/new", check_rc=False)["rc"] != 0, "the write reached the server")
    finally:
        delete_pods(t, "vm-nfs-ro")
        t.drop_pv(pv)
        g.sh("rm", "-f", f"{NFS_EXPORT}/ro-f")


def case_vmnode_nfs_subpath(t):
    """The driver's subPath (the mount's source is server:/share/sub) and a pod's volumeMount
    subPath below it: the file lands in share/sub/dir on the server."""
    g = guest()
    pv = "vm-nfs-sub"
    g.sh("mkdir", "-p", f"{NFS_EXPORT}/sub")
    flex_pv(t, pv, "nfs", _nfs_opts("4.2", subPath="sub"), "ReadWriteMany")
    try:
        run_pod(t, g, "vm-nfs-sub", "echo sub-data > /data/f && echo WROTE && sleep 3600", pv, "WROTE",
                sub_path="dir")
        m = _nfs_mount_of(g, pod_volume_dir(t, "vm-nfs-sub", "nfs", pv))
        check(m is not None and m[2] == f"{NFS_SERVER}:{NFS_EXPORT}/sub", f"subPath mount in the guest: {m}")
        srv = g.sh("cat", f"{NFS_EXPORT}/sub/dir/f", check_rc=False)
        check(srv["stdout"] == "sub-data\n", f"server's {NFS_EXPORT}/sub/dir/f: {srv}")
    finally:
        delete_pods(t, "vm-nfs-sub")
        t.drop_pv(pv)
        g.sh("rm", "-rf", f"{NFS_EXPORT}/sub")


def case_vmnode_nfs_fsgroup(t):
    """fsGroup on an nfs volume: the driver's init says fsGroup:false, so the kubelet leaves the
    share's ownership alone: a pod with runAsUser 1000 and fsGroup 4321 gets 4321 as a
    supplementary group (the pod's own setting), but the volume's root stays root:root 0755 on the
    server (no chgrp, no setgid bit, no group write), the pod's write there is refused
    (Permission denied) and the existing file keeps its owner and mode."""
    g = guest()
    pv = "vm-nfs-fsg"
    g.sh("sh", "-c", f"mkdir -p {NFS_EXPORT}/fsg && echo fsg-data > {NFS_EXPORT}/fsg/f && "
         f"chown -R 0:0 {NFS_EXPORT}/fsg && chmod 0755 {NFS_EXPORT}/fsg && chmod 0644 {NFS_EXPORT}/fsg/f")
    flex_pv(t, pv, "nfs", _nfs_opts("4.2", subPath="fsg"), "ReadWriteMany")
    try:
        run_pod(t, g, "vm-nfs-fsg", "id; stat -c 'ROOT %u:%g %a' /data; cat /data/f; "
                "echo x > /data/new 2>&1 || echo WRITE-REFUSED; sleep 3600", pv, "WRITE-REFUSED",
                security={"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 4321})
        m = _nfs_mount_of(g, pod_volume_dir(t, "vm-nfs-fsg", "nfs", pv))
        check(m is not None and m[1] == "nfs4", f"mount in the guest: {m}")
        out = t.logs("vm-nfs-fsg")
        ids = re.search(r"groups=(\S+)", out)
        check(ids and "4321" in ids.group(1), f"fsGroup 4321 not among the pod's groups: {out!r}")
        check("ROOT 0:0 755" in out and "fsg-data" in out, f"the volume's root in the pod: {out!r}")
        check("Permission denied" in out, f"the write was not refused for lack of permission: {out!r}")
        srv = g.sh("stat", "-c", "%u:%g %a", f"{NFS_EXPORT}/fsg", f"{NFS_EXPORT}/fsg/f")["stdout"].split("\n")
        check(srv[:2] == ["0:0 755", "0:0 644"], f"ownership on the server changed: {srv}")
        check(g.sh("test", "-e", f"{NFS_EXPORT}/fsg/new", check_rc=False)["rc"] != 0, "the write reached the server")
    finally:
        delete_pods(t, "vm-nfs-fsg")
        t.drop_pv(pv)
        g.sh("rm", "-rf", f"{NFS_EXPORT}/fsg")


def _nfsd_stop(g):
    g.sh("rpc.nfsd", "0")
    check(g.sh("cat", "/proc/fs/nfsd/threads")["stdout"].strip() == "0", "nfsd still running")


def _nfsd_start(g):
    """nfsd's threads back, with the shortest NFSv4 lease and grace (10 s: a restarted server
    holds OPENs for the grace period; they can be set only while no thread runs)"""
    g.sh("sh", "-c", "echo 10 >/proc/fs/nfsd/nfsv4leasetime; echo 10 >/proc/fs/nfsd/nfsv4gracetime; "
         "rpc.nfsd 8", check_rc=False)
    C.wait_for("nfsd registered again", lambda: " nfs" in g.sh("rpcinfo", "-p", "127.0.0.1", check_rc=False)["stdout"],
               60, 1)


def _gone(t, name):
    return t.k("get", "pod", name, "-n", NS, check=False).returncode != 0


def _ms(o):
    """a driver call's duration_ms (LINE_RE's seventh group, which Guest.ops names 'rest')"""
    return int(o["rest"])


def _ops_of(g, since, op, pv):
    return [o for o in g.ops(since) if o["driver"] == "nfs" and o["op"] == op and o["volume"] == pv]


def _server_stopped(t, g, pv, opts, hold):
    """pod A writes a heartbeat on @pv; nfsd stopped; pod B asks for the volume (its mount must
    fail within the driver's deadline) and pod A is deleted; watched for @hold s with the server
    down, then the server back: A gone, B running. Returns what was seen (seconds)."""
    mt = 60                                     # mount_timeout: the node config's default
    seen = {}
    g.sh("mkdir", "-p", f"{NFS_EXPORT}/dead")
    flex_pv(t, pv, "nfs", opts, "ReadWriteMany")
    up = True
    try:
        run_pod(t, g, f"{pv}-a", "while :; do date +%s > /data/hb-a; echo BEAT; sleep 1; done", pv, "BEAT")
        check(_nfs_mount_of(g, pod_volume_dir(t, f"{pv}-a", "nfs", pv)) is not None, "pod A's volume is not mounted")
        gpos = g.logpos()
        _nfsd_stop(g)
        up = False
        t0 = time.monotonic()
        vpod(t, g, f"{pv}-b", "cat /data/hb-a && echo B-READ; sleep 3600", pv)
        t.k("delete", "pod", f"{pv}-a", "-n", NS, "--grace-period=2", "--wait=false")
        end = t0 + hold
        while time.monotonic() < end:
            if "a_gone" not in seen and _gone(t, f"{pv}-a"):
                seen["a_gone"] = round(time.monotonic() - t0, 1)
            if "a_unmount" not in seen and _ops_of(g, gpos, "unmount", pv):
                seen["a_unmount"] = round(time.monotonic() - t0, 1)
            if "b_mount_failure" not in seen and [o for o in _ops_of(g, gpos, "mount", pv)
                                                  if o["status"].startswith("Failure")]:
                seen["b_mount_failure"] = round(time.monotonic() - t0, 1)
            time.sleep(2)
        seen["calls_while_down"] = [(o["op"], o["status"].split()[0], _ms(o)) for o in g.ops(gpos)
                                    if o["driver"] == "nfs"]
        _nfsd_start(g)
        up = True
        t1 = time.monotonic()
        C.wait_for(f"pod {pv}-a gone after the server came back", lambda: _gone(t, f"{pv}-a"), 300, 1)
        seen["a_gone_after_restart"] = round(time.monotonic() - t1, 1)
        t.wait_pod(f"{pv}-b", timeout=300)
        t.wait_log(f"{pv}-b", "B-READ", 120)
        seen["b_running_after_restart"] = round(time.monotonic() - t1, 1)
        seen["calls"] = [(o["op"], o["status"].split()[0], _ms(o)) for o in g.ops(gpos) if o["driver"] == "nfs"]
        return seen
    finally:
        if not up:
            _nfsd_start(g)
        delete_pods(t, f"{pv}-a", f"{pv}-b")
        t.drop_pv(pv)
        g.sh("rm", "-rf", f"{NFS_EXPORT}/dead")


# the driver's own deadlines (node config defaults): mount_timeout 60 s kills mount.nfs; unmount
# takes a quarter of it (15 s), then MNT_FORCE in 5 s, then MNT_DETACH
NFS_MOUNT_DEADLINE_MS = 60000 + 5000
NFS_UNMOUNT_DEADLINE_MS = 15000 + 5000 + 5000


def _calls_within_deadlines(seen):
    for op, st, ms in seen["calls"]:
        lim = NFS_MOUNT_DEADLINE_MS if op == "mount" else NFS_UNMOUNT_DEADLINE_MS
        check(ms <= lim, f"the driver's {op} took {ms} ms ({st}); its deadline is {lim} ms: {seen}")
    fails = [c for c in seen["calls_while_down"] if c[0] == "mount" and c[1] == "Failure"]
    check(fails, f"no mount Failure for pod B while the server was down: {seen}")


def case_vmnode_nfs_server_stopped(t):
    """The NFS server stopped (nfsd's threads to 0) under a running pod on a default (hard) mount,
    then a second pod asks for the volume and the first is deleted; 100 s later the server comes
    back. The driver's own calls stay within their deadlines (pod B's mount fails within
    mount_timeout, each retry too; any unmount within its 25 s), and what the kubelet does is
    measured and printed: on a hard mount its own stat of pod A's volume directory (before it
    calls the driver's unmount) blocks until the server is back, so pod A stays Terminating with
    no unmount call; then A goes and B starts."""
    g = guest()
    seen = _server_stopped(t, g, "vm-nfs-hard", _nfs_opts("4.2", subPath="dead"), 100)
    log(f"server stopped, hard mount: {seen}")
    _calls_within_deadlines(seen)


def case_vmnode_nfs_server_stopped_soft(t):
    """The same with mountOptions soft,timeo=50,retrans=1 (the client gives up on a request
    after about 5 s + 10 s and answers EIO): the kubelet's stat of pod A's volume directory
    returns, the driver's unmount runs (forced or lazy) and pod A is gone while the server is
    still down; the driver's calls within their deadlines; B starts once the server is back."""
    g = guest()
    seen = _server_stopped(t, g, "vm-nfs-soft",
                           _nfs_opts("4.2", subPath="dead", mountOptions="soft,timeo=50,retrans=1"), 100)
    log(f"server stopped, soft mount: {seen}")
    _calls_within_deadlines(seen)
    check("a_gone" in seen and "a_unmount" in seen,
          f"on a soft mount pod A did not go while the server was down: {seen}")


def case_vmnode_nfs_stale(t):
    """The export removed and re-created under a running pod (exportfs -ua, the exported
    directory deleted and made again, exportfs -ra): the old mount's handle is stale (the pod
    sees "Stale file handle", or "Permission denied" if it looked while the path was not
    exported); the pod is deleted (the driver's unmount within its deadline, the
    directory empty); a new pod on the same volume mounts the new directory and writes there."""
    g = guest()
    pv = "vm-nfs-stale"
    d = f"{NFS_EXPORT}/stale"
    g.sh("sh", "-c", f"mkdir -p {d} && echo old > {d}/f")
    flex_pv(t, pv, "nfs", _nfs_opts("4.2", subPath="stale"), "ReadWriteMany")
    try:
        run_pod(t, g, "vm-nfs-stale-a", "cat /data/f; while :; do if ! e=$(ls /data 2>&1 >/dev/null); then "
                "echo \"$e\"; echo GONE; sleep 3600; fi; sleep 1; done", pv, "old")
        gpos = g.logpos()
        g.sh("sh", "-c", f"exportfs -ua && rm -rf {d} && mkdir {d} && echo new > {d}/f && exportfs -ra")
        t.wait_log("vm-nfs-stale-a", "GONE", 120)
        out = t.logs("vm-nfs-stale-a")
        # "Stale file handle" once the new export is there; "Permission denied" when the pod's
        # look fell between exportfs -ua and -ra (the client's answer for an unexported path;
        # seen once in a run of .ci/run): either way the old mount no longer serves the old files
        check("Stale file handle" in out or "Permission denied" in out,
              f"pod A's view after the export was re-created: {out!r}")
        log("stale: pod A saw %r" % out.splitlines()[-2:-1])
        t0 = time.monotonic()
        delete_pods(t, "vm-nfs-stale-a")
        log(f"stale: pod A deleted in {time.monotonic() - t0:.1f} s")
        um = _ops_of(g, gpos, "unmount", pv)
        check(um and um[-1]["status"].startswith("Success") and _ms(um[-1]) <= NFS_UNMOUNT_DEADLINE_MS,
              f"pod A's unmount: {um}")
        left = [m for m in g.mounts() if m[1] in ("nfs", "nfs4")]
        check(not left, f"nfs mounts left in the guest: {left}")
        run_pod(t, g, "vm-nfs-stale-b", "cat /data/f; echo b > /data/b && echo WROTE; sleep 3600", pv, "WROTE")
        check("new" in t.logs("vm-nfs-stale-b"), f"pod B: {t.logs('vm-nfs-stale-b')!r}")
        check(g.sh("cat", f"{d}/b")["stdout"] == "b\n", "pod B's file is not in the re-created directory")
    finally:
        delete_pods(t, "vm-nfs-stale-a", "vm-nfs-stale-b")
        t.drop_pv(pv)
        g.sh("sh", "-c", f"exportfs -ra; rm -rf {d}")


def _iscsi_gone(g, iqn, within=0):
    """no session to the target, no node record, no disk of it left in the guest (after up to
    @within s: a pod deleted from the API may still have its UnmountDevice running)"""
    if within:
        try:
            C.wait_for(f"{g.name}'s session to {iqn} to go",
                       lambda: not [x for x in g.sessions() if iqn in x], within, 2)
        except TimeoutError:
            pass  # the check below says what is left
    s = [x for x in g.sessions() if iqn in x]
    check(not s, f"iSCSI session left: {s}")
    recs = [x for x in g.node_records() if x == iqn]
    check(not recs, f"open-iscsi node record left: {recs}")
    check(g.lun_disk(iqn) is None, f"the LUN's disk is still there: {g.lun_disk(iqn)}")


def _iscsi_in_use(t, g, pv, pod, iqn, mode, lun=1):
    """the pod runs on @g: one session to the target, the LUN's disk in /sys/block, mounted (the
    pod dir; in controller mode also the global mount, in node mode the driver's device mount;
    mode "csi": kubelet's staging dir and the pod's dir of iscsi.csi.flexvol, one each),
    @g's key alone registered and holding a WRITE EXCLUSIVE - REGISTRANTS ONLY reservation"""
    s = [x for x in g.sessions() if iqn in x]
    check(len(s) == 1, f"{g.name}: sessions to {iqn}: {g.sessions()}")
    dev = g.lun_disk(iqn, lun)
    check(dev is not None, f"{g.name}: no disk for LUN {lun} (by-path link)")
    check(g.sh("test", "-d", f"/sys/block/{os.path.basename(dev)}", check_rc=False)["rc"] == 0,
          f"{dev} not in /sys/block")
    mps = g.disk_mounts(dev)
    if mode == "csi":
        staged, pods = csi_mounts(g, pv, "iscsi.csi.flexvol")
        check(len(staged) == 1 and len(pods) == 1, f"{g.name}: CSI mounts: staging {staged}, pod {pods}")
        want = staged + pods
    else:
        want = [pod_volume_dir(t, pod, "iscsi", pv)]
    if mode == "controller":
        want.append(C.p("kubelet", "plugins", "kubernetes.io", "flexvolume", "flexvol", "iscsi", "mounts", pv))
    elif mode == "node":
        # node mode: the driver's own device mount, <run_dir>/iscsi/mounts/<name>/<ident>
        # (docs/design.md, "Node mode keys"; the lane's run_dir: cluster.py's FLEXVOL_RUN_DIR)
        own = os.path.join(C.RUN, "flexvol", "iscsi", "mounts", pv) + "/"
        want += [m for m in mps if m.startswith(own) and "/" not in m[len(own):]][:1]
    check(sorted(want) == mps, f"{g.name}: mounts of {dev}: {mps}, want {sorted(want)}")
    _reserved_by(g, dev)
    return dev


def _reserved_by(g, dev):
    """@g's key alone registered on @dev, holding a WRITE EXCLUSIVE - REGISTRANTS ONLY reservation"""
    keys, res = g.pr_state(dev)
    key = pr_key(g.initiator)
    check(res is not None and res[0] == key and "registrants only" in res[1].lower() and keys == [key],
          f"{g.name}: reservation of {dev}: keys {[hex(k) for k in keys]}, holder {res}; its key {key:#x}")


def case_vmnode_iscsi_controller(t):
    """iSCSI in controller mode (LUN 1 of the target without CHAP, whose session also shows
    LUN 2): attach in the controller-manager's driver log; waitforattach (login), mountdevice (the
    reservation taken), mount in the guest's; the LUN's own disk mounted at the global and the
    pod path; the pod writes; deleted: unmount, unmountdevice (logout), detach; no session, node
    record or disk left in the guest."""
    g = guest()
    t.ensure_mode("controller")
    pv = "vm-iscsi-c"
    flex_pv(t, pv, "iscsi", {"targetPortal": PORTAL, "iqn": IQN1, "lun": "1"}, "ReadWriteOnce", fs="ext4")
    try:
        _iscsi_controller_cycle(t, g, pv, "vm-iscsi-c", IQN1)
    finally:
        delete_pods(t, "vm-iscsi-c")
        t.drop_pv(pv)


def _iscsi_controller_cycle(t, g, pv, pod, iqn, gone_within=0):
    """A pod of PV @pv (iSCSI, target @iqn) through the controller-mode cycle: attach in the
    controller-manager's driver log; waitforattach (login), mountdevice (the reservation taken),
    mount in the guest's; the LUN's own disk mounted at the global and the pod path, and it is
    what waitforattach answered; the pod writes; deleted: unmount, unmountdevice (logout),
    detach; no session, node record or disk left in the guest (after up to @gone_within s)."""
    pos, gpos = t.logpos(), g.logpos()
    run_pod(t, g, pod, "echo iscsi-controller > /data/f && sync && echo WROTE && sleep 3600", pv, "WROTE")
    t.wait_op("kcm", "attach", pos, driver="iscsi")
    for op in ("waitforattach", "mountdevice", "mount"):
        g.wait_op(op, gpos, "iscsi")
    dev = _iscsi_in_use(t, g, pv, pod, iqn, "controller")
    # waitforattach's answer, as the kubelet took it: the LUN's own disk (the kubelet keeps
    # it as the volume's device path and passes it to mountdevice)
    wfa = re.findall(r'MountVolume\.WaitForAttach succeeded for volume \\"' + pv +
                     r'\\".*?DevicePath \\"([^"\\]*)\\"', g.kubelet_log())
    check(wfa and wfa[-1] == dev, f"waitforattach answered {wfa[-1:] or 'nothing'}; the LUN's disk is {dev}")
    pos, gpos = t.logpos(), g.logpos()
    delete_pods(t, pod)
    for op in ("unmount", "unmountdevice"):
        g.wait_op(op, gpos, "iscsi")
    t.wait_op("kcm", "detach", pos, driver="iscsi", timeout=300)
    _iscsi_gone(g, iqn, within=gone_within)


CHAP_FILE = "/etc/flexvol/chap/vm-target2"   # in the guest, below the policy's chapDir


def case_vmnode_iscsi_controller_chap_file(t):
    """iSCSI in controller mode with CHAP from a credentials file on the node (the target that
    requires it; the kubelet passes no Secret to waitforattach): the file written in the guest
    as an administrator would (root, 0600, below the policy's chapDir), the PV naming it; attach
    in the controller-manager, the login in the guest's waitforattach; the pod writes; deleted:
    logged out, no session, record or disk left; the secret in neither driver log."""
    g = guest()
    t.ensure_mode("controller")
    pv = "vm-iscsi-cf"
    g.sh("sh", "-c", f"umask 077 && mkdir -p {os.path.dirname(CHAP_FILE)} && cat > {CHAP_FILE}",
         input=f"session.username = {CHAP_USER}\nsession.password = {CHAP_SECRET}\n")
    portals = t.chap_portal_listed(PORTAL)
    try:
        admitted(t, lambda: flex_pv(t, pv, "iscsi", {"targetPortal": PORTAL, "iqn": IQN2, "lun": "1",
                                                     "chapCredentialsFile": CHAP_FILE}, "ReadWriteOnce", fs="ext4"))
        _iscsi_controller_cycle(t, g, pv, "vm-iscsi-cf", IQN2, gone_within=120)
    finally:
        delete_pods(t, "vm-iscsi-cf")
        t.drop_pv(pv)
        t.chap_portals_restored(portals)
        g.sh("rm", "-f", CHAP_FILE, check_rc=False)
    check(CHAP_SECRET not in g.read(GUEST_DRIVER_LOG)[0], "the CHAP secret is in the guest's driver log")
    with open(LOG_KCM, errors="replace") as f:
        check(CHAP_SECRET not in f.read(), "the CHAP secret is in the controller-manager's driver log")


def guest_mode(t, g, mode):
    """t.ensure_mode on the host, then the guest's side: its installer copied the mode's node
    config, its kubelet restarted so that it probes the drivers again"""
    t.ensure_mode(mode)
    conf = C.p("etc", "flexvol.conf")
    C.wait_for(f"the guest's node config in {mode} mode", lambda: (
        "\nattach_mode = node" in g.sh("cat", conf, check_rc=False)["stdout"]) == (mode == "node"), 180, 2)
    gpos = g.logpos()
    r = g.rpc({"op": "restart-kubelet"}, 400)
    check(r["rc"] == 0, f"restart of the guest's kubelet: {r}")
    g.wait_op("init", gpos, "iscsi", timeout=180)


def admitted(t, fn):
    """@fn (creating a PV) retried while the API server still holds the policy's old
    parameters (it takes in a changed ConfigMap within a second or so)"""
    def once():
        try:
            fn()
            return True
        except RuntimeError as x:  # cluster.sh: kubectl's exit
            if "denied request" not in str(x):
                raise
            return False
    C.wait_for("the policy's new parameters in force", once, 30, 1)


def case_vmnode_iscsi_node(t):
    """iSCSI in node mode (no attach controller), CHAP from the PV's Secret (the target that
    requires it): only mount and unmount in the guest's driver log (login, reservation, mkfs,
    mount all in mount); the pod writes; deleted: the session logged out, no record, no disk;
    the secret in no log."""
    g = guest()
    guest_mode(t, g, "node")
    pv = "vm-iscsi-n"
    t.apply({"apiVersion": "v1", "kind": "Secret", "type": "flexvol/iscsi",
             "metadata": {"name": "vm-chap", "namespace": NS},
             "data": {"session.username": base64.b64encode(CHAP_USER.encode()).decode(),
                      "session.password": base64.b64encode(CHAP_SECRET.encode()).decode()}})
    gpos = g.logpos()
    portals = t.chap_portal_listed(PORTAL)
    try:
        admitted(t, lambda: flex_pv(t, pv, "iscsi", {"targetPortal": PORTAL, "iqn": IQN2, "lun": "1"},
                                    "ReadWriteOnce", fs="ext4", secret="vm-chap"))
        run_pod(t, g, "vm-iscsi-n", "echo node > /data/f && sync && echo WROTE && sleep 3600", pv, "WROTE")
        g.wait_op("mount", gpos, "iscsi")
        calls = {o["op"] for o in g.ops(gpos) if o["driver"] == "iscsi"}
        check(not calls & {"attach", "waitforattach", "mountdevice"}, f"node mode, calls: {sorted(calls)}")
        _iscsi_in_use(t, g, pv, "vm-iscsi-n", IQN2, "node")
        gpos = g.logpos()
        delete_pods(t, "vm-iscsi-n")
        g.wait_op("unmount", gpos, "iscsi")
        _iscsi_gone(g, IQN2)
    finally:
        delete_pods(t, "vm-iscsi-n")
        t.drop_pv(pv)
        t.delete("secret", "vm-chap")
        t.chap_portals_restored(portals)
    check(CHAP_SECRET not in g.read(GUEST_DRIVER_LOG)[0], "the CHAP secret is in the guest's driver log")


# --- Kubernetes' external storage e2e suites against flexvol/nfs (make check-kube-vm-e2e) ----------

E2E_SHARE = f"{NFS_EXPORT}/e2e"
E2E_CLASS = "flexvol-nfs-e2e"
E2E_HOST_TAINT = "flexvol.test/e2e-host"
# every external suite for flexvol-nfs that needs no optional feature, no disruption and no second
# node (e2e_suites.SKIP_ALWAYS); FLEXVOL_E2E_FOCUS / _SKIP override
E2E_FOCUS = r"External.Storage.*flexvol-nfs"
E2E_SKIP = E2E.SKIP_ALWAYS


def provisioner_on_guest(t, g, share):
    """deploy/provisioner's rbac.yaml and deployment.yaml on the guest node, its share the
    guest's export below @share as the manifest mounts it (an nfs volume: the guest's kubelet
    mounts it), the API server at 10.0.2.2 (QEMU's gateway)"""
    prov = os.path.join(C.ROOT, "deploy", "provisioner")
    g.sh("mkdir", "-p", share)
    objs = t.objs(os.path.join(prov, "rbac.yaml")) + t.objs(os.path.join(prov, "deployment.yaml"))
    for o in objs:
        if o["kind"] != "Deployment":
            continue
        o["spec"]["replicas"] = 1
        spec = o["spec"]["template"]["spec"]
        spec.pop("affinity", None)
        spec["hostNetwork"] = True
        spec["nodeSelector"] = {"kubernetes.io/hostname": g.name}
        spec["tolerations"] = [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}]
        ct = spec["containers"][0]
        ct["image"] = INSTALLER
        ct["imagePullPolicy"] = "Never"
        ct["env"] = ct.get("env", []) + [{"name": "KUBERNETES_SERVICE_HOST", "value": "10.0.2.2"},
                                         {"name": "KUBERNETES_SERVICE_PORT", "value": "6443"}]
        ct["args"] = [f"--share={NFS_SERVER}:{share}" if a.startswith("--share=") else a for a in ct["args"]]
        for v in spec["volumes"]:
            if v["name"] == "share":
                v["nfs"] = {"server": NFS_SERVER, "path": share}
    t.k("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
    r = t.k("-n", "kube-system", "rollout", "status", "deploy/flexvol-provisioner", "--timeout=300s",
            check=False, timeout=330)
    check(r.returncode == 0, f"provisioner on the guest: {r.stderr.strip()} "
          f"{t.k('-n', 'kube-system', 'get', 'pods', '-o', 'wide', check=False).stdout}")


def provisioner_gone(t):
    t.k("-n", "kube-system", "delete", "deploy", "flexvol-provisioner", "--ignore-not-found", "--wait=true",
        "--timeout=120s", check=False, timeout=150)


def guest_class(t, name, share, **params):
    """deploy/provisioner/storageclass.yaml's class, named @name, served from the guest's @share"""
    sc = [o for o in t.objs(os.path.join(C.ROOT, "deploy", "provisioner", "storageclass.yaml"))
          if o["kind"] == "StorageClass"][0]
    sc["metadata"]["name"] = name
    sc["parameters"].update({"server": NFS_SERVER, "share": share, "nfsVersion": "4.2"}, **params)
    sc["parameters"].pop("mountOptions", None)
    t.apply(sc)


PROV_SHARE = f"{NFS_EXPORT}/prov"


def case_vmnode_provisioner(t):
    """flexvol-provisioner as deploy/provisioner ships it, on the guest node, its share the
    guest's export mounted the way the Deployment mounts it: a claim of each onDelete (archive,
    delete, retain) provisioned, one directory each on the server's export; a pod on the guest
    mounts the three (flexvol/nfs under the guest's kubelet) and writes in each, and the server's
    directories hold what it wrote; the claims deleted: the PVs go, and the export shows each
    onDelete (archived-<dir> with the file, the directory gone, the directory kept)."""
    g = guest()
    ods = ("archive", "delete", "retain")
    names = [f"vm-prov-{od}" for od in ods]

    def dirs():
        return sorted(g.sh("ls", "-A", PROV_SHARE)["stdout"].split())
    provisioner_on_guest(t, g, PROV_SHARE)
    try:
        for od in ods:
            guest_class(t, f"flexvol-nfs-vm-{od}", PROV_SHARE, onDelete=od)
        t.k("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": n, "namespace": NS},
             "spec": {"storageClassName": f"flexvol-nfs-vm-{od}", "accessModes": ["ReadWriteMany"],
                      "resources": {"requests": {"storage": "1Gi"}}}} for n, od in zip(names, ods)]}))
        P.wait_bound(t, names, timeout=180)
        dirname = {}
        for n in names:
            match = [d for d in dirs() if f"-{n}-" in d]
            check(len(match) == 1, f"directories of {n} on the export: {match} (all: {dirs()})")
            dirname[n] = match[0]
        run_pod(t, g, "vm-prov", "for d in /data/*; do echo \"$d\" > $d/f; done && sync && echo WROTE && sleep 3600",
                names, "WROTE")
        pvs = P.pvs_of(t, names)
        for n in names:
            got = g.read(f"{PROV_SHARE}/{dirname[n]}/f")[0]
            check(got == f"/data/{n}\n", f"the export's {dirname[n]}/f holds {got!r}")
            check(_nfs_mount_of(g, pod_volume_dir(t, "vm-prov", "nfs", pvs[n][0]["metadata"]["name"]))
                  is not None, f"{n}: no NFS mount at the pod's volume directory in the guest")
        delete_pods(t, "vm-prov")
        for n in names:
            t.delete("pvc", n)
        C.wait_for("the three PVs deleted", lambda: not any(P.pvs_of(t, names).values()), 180, 1)
        a, d, r = (dirname[n] for n in names)

        def settled():
            now = dirs()
            return a not in now and d not in now and r in now and f"archived-{a}" in now
        try:
            C.wait_for("onDelete applied on the export", settled, 60, 1)
        except TimeoutError as e:
            raise CaseFailed(f"{e}: the export holds {dirs()}; expected {a} archived, {d} deleted, {r} kept")
        check(g.read(f"{PROV_SHARE}/archived-{a}/f")[0] == f"/data/{names[0]}\n", "the archived directory lost its file")
    finally:
        delete_pods(t, "vm-prov")
        for n in names:
            t.delete("pvc", n)
        for od in ods:
            t.k("delete", "storageclass", f"flexvol-nfs-vm-{od}", "--ignore-not-found", check=False)
        provisioner_gone(t)
        g.sh("rm", "-rf", PROV_SHARE, check_rc=False)


def case_vmnode_nfs_e2e(t):
    """Kubernetes' external storage e2e suites (e2e.test of the pinned k8s.io/kubernetes,
    tests/kube/e2e/test-driver-nfs.yaml) against a flexvol/nfs class served by
    flexvol-provisioner on the guest's export; the suites' pods run on the guest (for the run the
    host node carries a NoSchedule taint of its own instead, which the suites are told not to
    mind). The summary and every failed spec are printed, the JUnit report kept in
    build/kube-e2e-nfs/."""
    g = guest()
    provisioner_on_guest(t, g, E2E_SHARE)
    guest_class(t, E2E_CLASS, E2E_SHARE, onDelete="delete")
    try:
        _e2e_on_guest(t, g, "test-driver-nfs.yaml", E2E_FOCUS, "kube-e2e-nfs", E2E_SHARE)
    finally:
        t.k("delete", "storageclass", E2E_CLASS, "--ignore-not-found", check=False)
        provisioner_gone(t)


def _e2e_on_guest(t, g, driver_file, focus, report, share, skip=E2E_SKIP):
    """e2e.test with @driver_file and @focus, its pods on the guest: the suites' images imported
    there, the guest's taint lifted and the host node tainted instead for the run; the share's
    leftovers printed."""
    sock = os.path.join(C.RUN, "containerd", "containerd.sock")
    E2E.import_images(lambda *a: g.sh(os.path.join(t.cl.bin, "ctr"), "--address", sock, "-n", "k8s.io",
                                      *a, timeout=600), os.environ["FLEXVOL_E2E_DIR"])
    t.k("taint", "node", C.NODE, f"{E2E_HOST_TAINT}=true:NoSchedule", "--overwrite")
    t.k("taint", "node", g.name, f"{TAINT}-")
    try:
        rc, secs, log_ = E2E.run(driver_file, focus, skip, report, [
            f"-non-blocking-taints={E2E_HOST_TAINT},node-role.kubernetes.io/control-plane"])
    finally:
        t.k("taint", "node", g.name, f"{TAINT}=true:NoSchedule", "--overwrite", check=False)
        t.k("taint", "node", C.NODE, f"{E2E_HOST_TAINT}-", check=False)
    log(f"e2e suites ({driver_file}): {secs:.0f} s; share left: "
        f"{g.sh('ls', '-A', share, check_rc=False)['stdout'].split()}")
    check(rc == 0, f"e2e.test exit {rc}; log {log_}")


# --- the nfs and iscsi drivers over CSI on the guest (make check-kube-vm-csi) -----------------------

CSI_SHARE = f"{NFS_EXPORT}/csi"
# the guest runs them (csi-snapshotter beside the nfs controller; the snapshot-controller runs on the host)
CSI_IMAGES = ("csi-node-driver-registrar.tar", "csi-provisioner.tar", "csi-attacher.tar", "csi-snapshotter.tar")
CSI_DRIVERS = ("nfs.csi.flexvol", "iscsi.csi.flexvol")


def csi_mounts(g, pv, driver):
    """the guest's mounts of a CSI volume: (kubelet's staging dirs of @driver, the pods' dirs of @pv)"""
    ms = [m[0] for m in g.mounts()]
    return ([m for m in ms if f"/plugins/kubernetes.io/csi/{driver}/" in m],
            [m for m in ms if m.endswith(f"/volumes/kubernetes.io~csi/{pv}/mount")])


SNAP_CRDS = ("volumesnapshotclasses", "volumesnapshotcontents", "volumesnapshots")


def snapshot_parts(t, d):
    """what csi_install adds for snapshots of nfs volumes, as docs/migration.md tells a site: the
    CRDs applied (deploy/csi/snapshot/crd) and Established, then, in the kustomization in @d, the
    Components deploy/csi/snapshot (csi-snapshotter in the nfs controller's Deployment, wherever
    that runs; the VolumeSnapshotClasses) and deploy/csi/snapshot/controller (the
    snapshot-controller, here on the host node's network) with the lane's images. Returns
    (components, images, patches)."""
    t.k("apply", "-k", os.path.join(C.ROOT, "deploy", "csi", "snapshot", "crd"), timeout=120)
    t.k("wait", "--for=condition=Established", "--timeout=60s",
        *[f"crd/{c}.snapshot.storage.k8s.io" for c in SNAP_CRDS], timeout=90)
    snap = os.path.relpath(os.path.join(C.ROOT, "deploy", "csi", "snapshot"), d)
    images = [{"name": f"registry.k8s.io/sig-storage/{n}", "newName": f"localhost/flexvol/{n}", "newTag": "kube-test"}
              for n in ("csi-snapshotter", "snapshot-controller")]
    ctl = {"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "flexvol-snapshot-controller", "namespace": "kube-system"},
           "spec": {"template": {"spec": {
               "hostNetwork": True, "nodeSelector": {"kubernetes.io/hostname": C.NODE},
               "containers": [{"name": "snapshot-controller", "imagePullPolicy": "Never",
                               "env": [{"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
                                       {"name": "KUBERNETES_SERVICE_PORT", "value": "6443"}]}]}}}}
    return [snap, os.path.join(snap, "controller")], images, [{"patch": json.dumps(ctl)}]


def csi_install(t, share, controllers, name="csi-vm", snapshots=False):
    """deploy/csi/nfs and deploy/csi/iscsi installed as a site installs them, through a
    kustomization of the run's own (C.p("csi-install", name)): the lane's kubeadm install, the
    Component tests/kube/overlays/csi-vm (both drivers' Components with the lane's images, paths
    and HOST_NS_PID=kubelet), the nfs controller's share (SERVER, PATH) as a site gives it: the
    ConfigMap flexvol-csi-nfs-share, which deploy/csi/nfs's replacements put into the
    controller's --share and its share volume (no patch of either); and @controllers: {Deployment:
    (node, API server address, replicas)}, where the controllers run (on the node's network: the
    lane has no service network; a guest reaches the API server at QEMU's gateway, the host node
    at 127.0.0.1). Applied; the installer and the controllers with replicas rolled out. Returns
    the Deployments as the API server has them. @snapshots: with snapshot_parts()."""
    d = C.p("csi-install", name)
    os.makedirs(d, exist_ok=True)

    def rel(*parts):
        return os.path.relpath(os.path.join(C.ROOT, "tests", "kube", "overlays", *parts), d)

    def patch(dep, node, api, replicas):
        env = [{"name": "KUBERNETES_SERVICE_HOST", "value": api},
               {"name": "KUBERNETES_SERVICE_PORT", "value": "6443"}]
        sidecars = {"flexvol-csi-nfs-controller": ["csi-provisioner"] + (["csi-snapshotter"] if snapshots else []),
                    "flexvol-csi-iscsi-controller": ["csi-attacher"]}[dep]
        spec = {"replicas": replicas, "template": {"spec": {
            "hostNetwork": True, "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": s, "env": env, **({"imagePullPolicy": "Never"} if s == "csi-snapshotter" else {})}
                           for s in sidecars]}}}
        return {"patch": json.dumps({"apiVersion": "apps/v1", "kind": "Deployment",
                                     "metadata": {"name": dep, "namespace": "kube-system"}, "spec": spec})}
    server, path = share
    components, images, patches = snapshot_parts(t, d) if snapshots else ([], [], [])
    C.write(os.path.join(d, "kustomization.yaml"), json.dumps({
        "resources": [rel("kubeadm")],
        "components": [rel("csi-vm")] + components,
        "configMapGenerator": [{"name": "flexvol-csi-nfs-share", "literals": [f"server={server}", f"path={path}"],
                                "options": {"annotations": {"config.kubernetes.io/local-config": "true"}}}],
        "images": images,
        "patches": [patch(dep, *where) for dep, where in controllers.items()] + patches}, indent=1) + "\n")
    t.k("apply", "-k", d, timeout=120)
    t.installed = "csi-vm"
    t.rollout(timeout=900)
    for dep, (_, _, replicas) in list(controllers.items()) + ([("flexvol-snapshot-controller", (0, 0, 1))]
                                                              if snapshots else []):
        if replicas:
            r = t.k("-n", "kube-system", "rollout", "status", f"deploy/{dep}", "--timeout=600s", check=False,
                    timeout=630)
            check(r.returncode == 0, f"{dep}: {r.stderr.strip()} "
                  f"{t.k('-n', 'kube-system', 'get', 'pods', '-o', 'wide', check=False).stdout}")
    return {dep: t.kj("-n", "kube-system", "get", "deploy", dep) for dep in controllers}


def csi_registered(t, nodes, timeout=300):
    """kubelet on each of @nodes registered both drivers (CSINode), the node's name as node ID"""
    def registered(n):
        c = t.kj("get", "csinode", n)
        return {x["name"]: x.get("nodeID") for x in c.get("spec", {}).get("drivers") or []}
    C.wait_for(f"{', '.join(CSI_DRIVERS)} in CSINode {', '.join(nodes)}",
               lambda: all(x in registered(n) for n in nodes for x in CSI_DRIVERS), timeout, 1)
    for n in nodes:
        ids = registered(n)
        check(all(ids[x] == n for x in CSI_DRIVERS), f"node IDs on {n}: {ids}")


def nfs_share_of(dep):
    """the share a flexvol-csi-nfs-controller Deployment serves: (csi-nfs's --share, its share
    volume's server:path)"""
    spec = dep["spec"]["template"]["spec"]
    args = [c for c in spec["containers"] if c["name"] == "csi-nfs"][0]["args"]
    vol = [v for v in spec["volumes"] if v["name"] == "share"][0].get("nfs", {})
    return args[args.index("--share") + 1], f"{vol.get('server')}:{vol.get('path')}"


def case_vmnode_csi_install(t):
    """deploy/csi/nfs and deploy/csi/iscsi as shipped (csi_install: the lane's kubeadm install,
    the Component tests/kube/overlays/csi-vm, the guest's export as the nfs share in the ConfigMap
    flexvol-csi-nfs-share, as a site gives it), both controllers on the guest: the Deployment's
    --share and share volume are the ConfigMap's values (deploy/csi/nfs's replacements, nothing
    patched), the DaemonSets' csi-nfs and csi-iscsi run on both nodes (HOST_NS_PID=kubelet),
    kubelet on the guest registers both drivers with the node's name as node ID, both
    controllers run."""
    g = guest()
    g.sh("mkdir", "-p", CSI_SHARE)
    deps = csi_install(t, (NFS_SERVER, CSI_SHARE), {"flexvol-csi-nfs-controller": (g.name, "10.0.2.2", 1),
                                                   "flexvol-csi-iscsi-controller": (g.name, "10.0.2.2", 1)},
                       snapshots=True)
    want = f"{NFS_SERVER}:{CSI_SHARE}"
    got = nfs_share_of(deps["flexvol-csi-nfs-controller"])
    check(got == (want, want), f"the nfs controller's --share and share volume: {got}, want {want} (the ConfigMap's)")
    csi_registered(t, [g.name])


def case_vmnode_csi_nfs(t):
    """A claim of the class flexvol-csi-nfs (deploy/csi/nfs): CreateVolume makes its directory on
    the guest's export; two pods on the guest mount it at once (ReadWriteMany; NodePublishVolume
    mounts the share's directory through the nfs driver in the host's namespaces), one writes,
    the other reads, the export holds the file; the pods gone: no NFS mount of it left; the claim
    deleted: the PV and the directory go."""
    g = guest()
    claim = "vm-csi-nfs"

    def dirs():
        return sorted(g.sh("ls", "-A", CSI_SHARE)["stdout"].split())
    t.apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim, "namespace": NS},
             "spec": {"storageClassName": "flexvol-csi-nfs", "accessModes": ["ReadWriteMany"],
                      "resources": {"requests": {"storage": "1Gi"}}}})
    try:
        P.wait_bound(t, [claim], timeout=180)
        pv = t.kj("get", "pvc", claim, "-n", NS)["spec"]["volumeName"]
        check(pv in dirs(), f"no directory {pv} on the export: {dirs()}")
        run_pod(t, g, "vm-csi-nfs-w", "echo csi-nfs > /data/f && sync && echo WROTE && sleep 3600", claim, "WROTE")
        run_pod(t, g, "vm-csi-nfs-r", "cat /data/f && sleep 3600", claim, "csi-nfs")
        check(g.read(f"{CSI_SHARE}/{pv}/f")[0] == "csi-nfs\n", "the export's directory lacks the pod's file")
        _, pods = csi_mounts(g, pv, "nfs.csi.flexvol")
        check(len(pods) == 2 and all(_nfs_mount_of(g, m) is not None for m in pods),
              f"the two pods' NFS mounts in the guest: {pods}")
        delete_pods(t, "vm-csi-nfs-w", "vm-csi-nfs-r")
        C.wait_for("no pod mount of the volume left", lambda: not csi_mounts(g, pv, "nfs.csi.flexvol")[1], 120, 1)
        t.delete("pvc", claim)
        C.wait_for(f"PV {pv} deleted", lambda: t.k("get", "pv", pv, check=False).returncode != 0, 120, 1)
        C.wait_for(f"directory {pv} removed", lambda: pv not in dirs(), 60, 1)
    finally:
        delete_pods(t, "vm-csi-nfs-w", "vm-csi-nfs-r")
        t.delete("pvc", claim)


def csi_iscsi_pv(t, name, attrs, access="ReadWriteOnce", block=False):
    """a static PV of iscsi.csi.flexvol (the FlexVolume driver's options as its attributes) and its
    claim; @block: volumeMode Block"""
    csi = {"driver": "iscsi.csi.flexvol", "volumeHandle": name, "volumeAttributes": attrs}
    if not block:
        csi["fsType"] = "ext4"
    mode = "Block" if block else "Filesystem"
    t.apply({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
             "spec": {"capacity": {"storage": "64Mi"}, "accessModes": [access], "storageClassName": "",
                      "persistentVolumeReclaimPolicy": "Retain", "volumeMode": mode, "csi": csi}})
    t.apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": NS},
             "spec": {"accessModes": [access], "storageClassName": "", "volumeName": name, "volumeMode": mode,
                      "resources": {"requests": {"storage": "64Mi"}}}})
    C.wait_for(f"claim {name} Bound", lambda: t.kj("get", "pvc", name, "-n", NS)["status"].get("phase") == "Bound", 60)


def volume_attachments(t, pv):
    return [(a["spec"]["nodeName"], a.get("status", {}).get("attached"))
            for a in t.kj("get", "volumeattachments")["items"]
            if a["spec"]["source"].get("persistentVolumeName") == pv]


def case_vmnode_csi_iscsi(t):
    """A static PV of iscsi.csi.flexvol (LUN 1 of the target without CHAP): a pod on the guest;
    the attach/detach controller makes a VolumeAttachment for the guest and external-attacher
    marks it attached (ControllerPublishVolume); NodeStageVolume logs in, takes the reservation
    and mounts the LUN's disk at kubelet's staging dir, NodePublishVolume binds it into the pod,
    which writes; the pod deleted: no mount, session, node record or disk left in the guest, and
    the VolumeAttachment goes (ControllerUnpublishVolume)."""
    g = guest()
    pv = "vm-csi-iscsi"
    csi_iscsi_pv(t, pv, {"targetPortal": PORTAL, "iqn": IQN1, "lun": "1"})
    try:
        run_pod(t, g, pv, "echo csi-iscsi > /data/f && sync && echo WROTE && sleep 3600", pv, "WROTE")
        check(volume_attachments(t, pv) == [(g.name, True)], f"VolumeAttachments: {volume_attachments(t, pv)}")
        _iscsi_in_use(t, g, pv, pv, IQN1, "csi")
        delete_pods(t, pv)
        C.wait_for("the VolumeAttachment deleted", lambda: not volume_attachments(t, pv), 180, 1)
        _iscsi_gone(g, IQN1, within=60)
        check(csi_mounts(g, pv, "iscsi.csi.flexvol") == ([], []), f"mounts left: {csi_mounts(g, pv, 'iscsi.csi.flexvol')}")
    finally:
        delete_pods(t, pv)
        t.drop_pv(pv)


def case_vmnode_csi_iscsi_block(t):
    """A static PV of iscsi.csi.flexvol with volumeMode Block (issue 38.3; LUN 2 of the target
    without CHAP, which no other case of the lane uses): a pod on the guest sees the LUN's disk
    as /dev/xvda, a block device, and writes to it; staged and fenced as a filesystem volume is
    (one session, the guest's key alone holding the reservation) but nothing mounted from the
    disk; the pod deleted: the VolumeAttachment goes, no session, node record or disk left; a
    second pod reads the bytes back from the device."""
    g = guest()
    pv, data = "vm-csi-iscsi-block", "FLEXVOL-ISCSI-RAW"
    csi_iscsi_pv(t, pv, {"targetPortal": PORTAL, "iqn": IQN1, "lun": "2"}, block=True)
    try:
        vpod(t, g, "vm-blk-w", f"test -b /dev/xvda && printf {data} > /dev/xvda && sync && echo WROTE && "
             "sleep 3600", pv, block=True)
        t.wait_pod("vm-blk-w", timeout=300)
        t.wait_log("vm-blk-w", "WROTE", timeout=120)
        check(volume_attachments(t, pv) == [(g.name, True)], f"VolumeAttachments: {volume_attachments(t, pv)}")
        s = [x for x in g.sessions() if IQN1 in x]
        check(len(s) == 1, f"sessions to {IQN1}: {g.sessions()}")
        dev = g.lun_disk(IQN1, 2)
        check(dev is not None, "no disk for LUN 2 (by-path link)")
        check(not g.disk_mounts(dev), f"a filesystem mounted from the raw block volume's disk: {g.disk_mounts(dev)}")
        _reserved_by(g, dev)
        delete_pods(t, "vm-blk-w")
        C.wait_for("the VolumeAttachment deleted", lambda: not volume_attachments(t, pv), 180, 1)
        _iscsi_gone(g, IQN1, within=60)
        vpod(t, g, "vm-blk-r", f"head -c {len(data)} /dev/xvda; echo", pv, block=True)
        t.wait_pod("vm-blk-r", ("Succeeded",), timeout=300)
        check(data in t.logs("vm-blk-r"), f"read back: {t.logs('vm-blk-r')!r}")
        delete_pods(t, "vm-blk-r")
        C.wait_for("the VolumeAttachment deleted", lambda: not volume_attachments(t, pv), 180, 1)
        _iscsi_gone(g, IQN1, within=60)
    finally:
        delete_pods(t, "vm-blk-w", "vm-blk-r")
        t.drop_pv(pv)


def case_vmnode_csi_e2e(t):
    """Kubernetes' external storage e2e suites through CSI (tests/kube/e2e/test-driver-csi-nfs.yaml)
    against the class flexvol-csi-nfs of deploy/csi/nfs, on the guest's export, with the snapshot
    and clone patterns (the VolumeSnapshotClass flexvol-csi-nfs, [Feature:VolumeSnapshotDataSource]
    allowed); the JUnit report in build/kube-e2e-csi-nfs/."""
    g = guest()
    focus = r"External.Storage.*nfs\.csi\.flexvol"
    _e2e_on_guest(t, g, "test-driver-csi-nfs.yaml", focus, "kube-e2e-csi-nfs", CSI_SHARE, E2E.SKIP_CSI)


def case_vmnode_csi_migrate(t):
    """flexvol-provisioner migrate on the guest's volumes (docs/migration.md): an NFS FlexVolume PV
    and an iSCSI one, each written through FlexVolume, moved to CSI (the same claim, the same
    share directory or LUN), read and written through CSI, then rolled back and read through
    FlexVolume again."""
    import cases_csi as CSI
    g = guest()
    g.sh("mkdir", "-p", f"{CSI_SHARE}/mig")
    vols = {"vm-mig-nfs": ("nfs", dict(_nfs_opts("4.2"), share=f"{CSI_SHARE}/mig"), "ReadWriteMany", None),
            "vm-mig-iscsi": ("iscsi", {"targetPortal": PORTAL, "iqn": IQN1, "lun": "1"}, "ReadWriteOnce", "ext4")}
    try:
        for pv, (drv, opts, access, fs) in vols.items():
            flex_pv(t, pv, drv, opts, access, fs=fs)
            run_pod(t, g, pv, f"echo {pv}-flex > /data/f && sync && echo WROTE && sleep 3600", pv, "WROTE")
            delete_pods(t, pv)
            CSI.migrate_when_idle(t, pv)
            src = t.kj("get", "pv", pv)["spec"]
            check(src.get("csi", {}).get("driver") == f"{drv}.csi.flexvol" and "flexVolume" not in src,
                  f"{pv} after migrate: {src}")
            run_pod(t, g, pv, f"cat /data/f && echo {pv}-csi >> /data/f && sync && echo WROTE2 && sleep 3600",
                    pv, "WROTE2")
            t.wait_log(pv, f"{pv}-flex")
            delete_pods(t, pv)
            CSI.migrate_when_idle(t, pv, rollback=True)
            check("flexVolume" in t.kj("get", "pv", pv)["spec"], f"{pv} after --rollback is no FlexVolume PV")
            run_pod(t, g, pv, "cat /data/f && echo READ && sleep 3600", pv, "READ")
            t.wait_log(pv, f"{pv}-csi")
            delete_pods(t, pv)
        _iscsi_gone(g, IQN1, within=60)
    finally:
        for pv in vols:
            delete_pods(t, pv)
            t.drop_pv(pv)
        g.sh("rm", "-rf", f"{CSI_SHARE}/mig", check_rc=False)


def _csi_lane_attach_mode(t, g, mode):
    """The FlexVolume attach mode under the CSI lane's install (csi-vm, on the kubeadm overlay:
    controller mode): the node config's attach_mode in the ConfigMap flexvol-config as
    deploy/overlays/kubeadm-1.36 sets it (node) or without that line (controller), the installer
    restarted (its pods copy the config; the CSI node plugins restart with them), the
    controller-manager with or without the FlexVolume plugin dir and both kubelets restarted, so
    that they probe the drivers again (as t.ensure_mode and guest_mode do for the kubeadm
    overlays); the CSI drivers registered on the guest again."""
    t0 = time.monotonic()
    line = "attach_mode = node\n"
    conf = t.kj("-n", "kube-system", "get", "cm", "flexvol-config")["data"]["flexvol.conf"]
    has = ("\n" + line) in conf
    if has == (mode == "node") and (t.mode or "controller") == mode:   # the lane starts in controller mode
        return
    if mode == "node" and not has:
        conf = conf + ("" if conf.endswith("\n") else "\n") + line
    elif mode != "node":
        conf = conf.replace("\n" + line, "\n")
    t.k("-n", "kube-system", "patch", "cm", "flexvol-config", "--type=merge", "-p",
        json.dumps({"data": {"flexvol.conf": conf}}))
    t.k("-n", "kube-system", "rollout", "restart", "ds/flexvol-installer")
    t.rollout(timeout=600)
    want = C.p("etc", "flexvol.conf")
    C.wait_for(f"the host's node config in {mode} mode", lambda: os.path.exists(want) and
               (("\nattach_mode = node" in open(want).read()) == (mode == "node")), 60)
    pos = t.logpos()
    t.cl.restart_kcm(flex=(mode == "controller"))
    t.cl.restart_kubelet()
    t.wait_op("kubelet", "init", pos, timeout=60)
    t.mode = mode
    C.wait_for(f"the guest's node config in {mode} mode", lambda: (
        "\nattach_mode = node" in g.sh("cat", want, check_rc=False)["stdout"]) == (mode == "node"), 180, 2)
    gpos = g.logpos()
    r = g.rpc({"op": "restart-kubelet"}, 400)
    check(r["rc"] == 0, f"restart of the guest's kubelet: {r}")
    g.wait_op("init", gpos, "iscsi", timeout=180)

    def registered():
        n = t.kj("get", "csinode", g.name)
        return {x["name"] for x in n.get("spec", {}).get("drivers") or []}
    C.wait_for(f"{', '.join(CSI_DRIVERS)} in CSINode {g.name} again",
               lambda: all(x in registered() for x in CSI_DRIVERS), 180, 1)
    log(f"FlexVolume attach mode {mode}: config, installer, controller-manager, kubelets in "
        f"{time.monotonic() - t0:.0f} s")


def _chap_user_of_session(g, iqn):
    """the CHAP user names the guest's sessions to @iqn logged in with (sysfs; never a password)"""
    r = g.sh("sh", "-c", "for s in /sys/class/iscsi_session/session*; do "
             f"[ \"$(cat $s/targetname)\" = '{iqn}' ] && cat $s/username; done; true")
    return r["stdout"].split()


CSI_CHAP_SECRET = "vm-csi-chap"


def case_vmnode_csi_migrate_chap(t):
    """migrate of a PV of the CHAP target (issue 37 point 2), with CHAP from a
    credentials file on the node (option chapCredentialsFile: it stays a volume attribute;
    FlexVolume in controller mode) and with CHAP from the PV's Secret (secretRef: migrate writes
    nodeStageSecretRef to the same Secret, whose keys kubelet hands NodeStageVolume as its node-stage
    secrets; FlexVolume in node mode, the one whose kubelet passes a Secret to the driver): each
    written through FlexVolume, moved to CSI (the PV's csi source checked), read and written through
    CSI with the session logged in as the CHAP user, rolled back (the FlexVolume source as it was)
    and read through FlexVolume again; no session, record or disk left; the secret in no driver log
    and in no log of flexvol-csi's containers. The target's portal is in the policy's chapPortals."""
    import cases_csi as CSI
    g = guest()
    g.sh("sh", "-c", f"umask 077 && mkdir -p {os.path.dirname(CHAP_FILE)} && cat > {CHAP_FILE}",
         input=f"session.username = {CHAP_USER}\nsession.password = {CHAP_SECRET}\n")
    t.apply({"apiVersion": "v1", "kind": "Secret", "type": "flexvol/iscsi",
             "metadata": {"name": CSI_CHAP_SECRET, "namespace": NS},
             "data": {"session.username": base64.b64encode(CHAP_USER.encode()).decode(),
                      "session.password": base64.b64encode(CHAP_SECRET.encode()).decode()}})
    opts = {"targetPortal": PORTAL, "iqn": IQN2, "lun": "1"}
    vols = (("vm-mig-chap-file", "controller", dict(opts, chapCredentialsFile=CHAP_FILE), None),
            ("vm-mig-chap-secret", "node", opts, CSI_CHAP_SECRET))
    portals = t.chap_portal_listed(PORTAL)
    try:
        for pv, mode, o, secret in vols:
            t0 = time.monotonic()
            _csi_lane_attach_mode(t, g, mode)
            admitted(t, lambda: flex_pv(t, pv, "iscsi", o, "ReadWriteOnce", fs="ext4", secret=secret))
            flex = t.kj("get", "pv", pv)["spec"]["flexVolume"]
            run_pod(t, g, pv, f"echo {pv}-flex > /data/f && sync && echo WROTE && sleep 3600", pv, "WROTE")
            check(_chap_user_of_session(g, IQN2) == [CHAP_USER],
                  f"{pv}: FlexVolume's session: CHAP users {_chap_user_of_session(g, IQN2)}")
            delete_pods(t, pv)
            _iscsi_gone(g, IQN2, within=120)
            CSI.migrate_when_idle(t, pv)
            csi = t.kj("get", "pv", pv)["spec"].get("csi", {})
            check(csi.get("driver") == "iscsi.csi.flexvol" and csi.get("volumeAttributes") == o,
                  f"{pv} after migrate: {csi}")
            want_ref = {"name": secret, "namespace": NS} if secret else None
            check(csi.get("nodeStageSecretRef") == want_ref,
                  f"{pv}: nodeStageSecretRef {csi.get('nodeStageSecretRef')}, want {want_ref}")
            run_pod(t, g, pv, f"cat /data/f && echo {pv}-csi >> /data/f && sync && echo WROTE2 && sleep 3600",
                    pv, "WROTE2")
            t.wait_log(pv, f"{pv}-flex")
            _iscsi_in_use(t, g, pv, pv, IQN2, "csi")
            check(_chap_user_of_session(g, IQN2) == [CHAP_USER],
                  f"{pv}: CSI's session: CHAP users {_chap_user_of_session(g, IQN2)}")
            delete_pods(t, pv)
            C.wait_for("the VolumeAttachment deleted", lambda: not volume_attachments(t, pv), 180, 1)
            _iscsi_gone(g, IQN2, within=60)
            CSI.migrate_when_idle(t, pv, rollback=True)
            back = t.kj("get", "pv", pv)["spec"]
            check(back.get("flexVolume") == flex and "csi" not in back,
                  f"{pv} after --rollback: {back.get('flexVolume') or back.get('csi')}, was {flex}")
            run_pod(t, g, pv, "cat /data/f && echo READ && sleep 3600", pv, "READ")
            t.wait_log(pv, f"{pv}-csi")
            delete_pods(t, pv)
            _iscsi_gone(g, IQN2, within=120)
            log(f"{pv}: FlexVolume ({mode} mode), CSI, FlexVolume again in {time.monotonic() - t0:.0f} s")
    finally:
        for pv, _, _, _ in vols:
            delete_pods(t, pv)
            t.drop_pv(pv)
        t.delete("secret", CSI_CHAP_SECRET)
        t.chap_portals_restored(portals)
        g.sh("rm", "-f", CHAP_FILE, check_rc=False)
        _csi_lane_attach_mode(t, g, "controller")
    forms = (CHAP_SECRET, base64.b64encode(CHAP_SECRET.encode()).decode())
    logs = {"the guest's driver log": g.read(GUEST_DRIVER_LOG)[0],
            "the guest's csi-iscsi log": g.read(C.p("log", "csi-iscsi.log"))[0]}
    with open(LOG_KCM, errors="replace") as f:
        logs["the controller-manager's driver log"] = f.read()
    pods = t.kj("-n", "kube-system", "get", "pods")["items"]
    for p in pods:
        for c in p["spec"]["containers"]:
            if c["name"].startswith("csi-iscsi") or c["name"] == "csi-attacher":
                r = t.k("-n", "kube-system", "logs", p["metadata"]["name"], "-c", c["name"], check=False)
                logs[f"the log of {p['metadata']['name']}/{c['name']}"] = r.stdout
    for what, text in logs.items():
        check(not any(x in text for x in forms), f"the CHAP secret is in {what}")


def case_vmnode_csi_remove(t):
    """The CSI controllers deleted (their pods with them, foreground): the guest's kubelet
    unmounts the nfs controller's share volume, so that the guest leaves with nothing mounted."""
    g = guest()
    for dep in ("flexvol-csi-nfs-controller", "flexvol-csi-iscsi-controller"):
        t.k("-n", "kube-system", "delete", "deploy", dep, "--ignore-not-found", "--cascade=foreground",
            "--wait=true", "--timeout=120s", check=False, timeout=150)
    C.wait_for("the nfs controller's share unmounted in the guest", lambda: not [
        m for m in g.mounts() if m[2] == f"{NFS_SERVER}:{CSI_SHARE}"], 120, 1)


def case_vmnode_down(t):
    """The guest leaves: pods on it deleted, its kubelet and containerd stopped; in the guest no
    pod mount, iSCSI session or node record, loop device, node mount or process is left; the
    guest powers off with status 0; the Node object is deleted; on the host no qemu, the forwarded
    port closed, the node's keys removed."""
    global GUEST
    g = guest()
    rep = g.stop()
    GUEST = None
    rc = g.proc.returncode
    left = {k: v for k, v in rep.items() if v and k != "containers_left_at_stop"}
    check(not left, f"left in the guest: {left}")
    check(rc == 0, f"the guest's run ended with {rc}:\n{g.console_tail()}")
    check(t.k("get", "node", g.name, check=False).returncode != 0, "the Node object is still there")
    s = socket.socket()
    try:
        s.settimeout(2)
        closed = s.connect_ex(("127.0.0.1", g.port)) != 0
    finally:
        s.close()
    check(closed, f"127.0.0.1:{g.port} still answers")
    check(not os.path.exists(g.path("base")), "the node's keys are still in the workspace")


CASES = []
if os.environ.get("FLEXVOL_KUBE_VMNODE") == "1":
    CASES = [case_vmnode_join, case_vmnode_nfs_v3_rwx, case_vmnode_nfs_v42, case_vmnode_nfs_readonly,
             case_vmnode_nfs_subpath, case_vmnode_nfs_fsgroup, case_vmnode_nfs_stale,
             case_vmnode_nfs_server_stopped, case_vmnode_nfs_server_stopped_soft,
             case_vmnode_iscsi_controller, case_vmnode_iscsi_controller_chap_file, case_vmnode_iscsi_node,
             case_vmnode_provisioner]
    if os.environ.get("FLEXVOL_E2E_DIR"):
        CASES.append(case_vmnode_nfs_e2e)
    CASES.append(case_vmnode_down)
if os.environ.get("FLEXVOL_KUBE_VMNODE_CSI") == "1":     # make check-kube-vm-csi: the join, these, the teardown
    CASES = [case_vmnode_join, case_vmnode_csi_install, case_vmnode_csi_nfs, case_vmnode_csi_iscsi,
             case_vmnode_csi_iscsi_block, case_vmnode_csi_migrate, case_vmnode_csi_migrate_chap] + ([case_vmnode_csi_e2e] if os.environ.get("FLEXVOL_E2E_DIR") else []) + \
        [case_vmnode_csi_remove, case_vmnode_down]
