#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A single-node Kubernetes cluster on 127.0.0.1, from the binaries tests/kube/build makes.

    python3 tests/kube/cluster.py up [--mode controller|node]   start it (and leave it running)
    python3 tests/kube/cluster.py down                          tear down everything (also what a
                                                                crashed run left behind)
    python3 tests/kube/cluster.py kubectl ARGS...                kubectl as cluster-admin

Everything lives under BASE (FLEXVOL_KUBE_BASE, default /var/lib/flexvol-kube) and RUN
(/run/flexvol-kube): certificates, etcd's data, containerd's root and state, the kubelet's root
dir, the FlexVolume plugin dir (BASE/plugins, kubelet --volume-plugin-dir and, in controller mode,
kube-controller-manager --flex-volume-plugin-dir), the drivers' config, loop root, state and logs
(the FLEXVOL_* environment of kubelet and kube-controller-manager, inherited by every driver call
they make), component logs (BASE/logs) and pid files (BASE/pids).

Facts this relies on are in the shared kube-lane notes and tests/kube/README.md: cgroupfs, the
kubelet's failCgroupV1: false (this host's cgroup layout is v1/hybrid), containerd's
restrict_oom_score_adj (no CAP_SYS_RESOURCE here), a CNI bridge that connects nothing, locally imported
images and imagePullPolicy: Never.
"""
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import ssl

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BASE = os.environ.get("FLEXVOL_KUBE_BASE", "/var/lib/flexvol-kube")
RUN = "/run/flexvol-kube"
NODE = os.uname().nodename.lower()
API = "https://127.0.0.1:6443"
PAUSE_IMAGE = "localhost/flexvol/pause:kube-test"
# Paths the kubelet (and containerd's shims) write whatever their root and state dirs say:
# removed at teardown when this lane created them.
FIXED_PATHS = ["/var/lib/kubelet", "/var/log/pods", "/var/log/containers", "/run/containerd",
               "/var/run/nri", "/opt/containerd", "/etc/cni"]


LOCK = "/run/lock/flexvol-kube.lock"
CNI_BRIDGE = "flexvolkube0"  # the pod network's bridge (connects nothing but the pods)


def take_lock():
    """One cluster at a time on this machine (they share BASE and the ports): an exclusive flock
    held by the returned file until the process ends. Waits for another run to finish."""
    os.makedirs(os.path.dirname(LOCK), exist_ok=True)
    f = open(LOCK, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        log(f"another cluster-lane run holds {LOCK}: waiting for it")
        fcntl.flock(f, fcntl.LOCK_EX)
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()}\n")
    f.flush()
    return f


def p(*parts):
    return os.path.join(BASE, *parts)


def log(msg):
    print(f"cluster: {msg}", flush=True)


def sh(argv, check=True, timeout=120, **kw):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {r.returncode}: {r.stderr.strip()[-2000:]}")
    return r


def write(path, text, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


def wait_for(what, fn, timeout, interval=0.5):
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        try:
            v = fn()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - anything means "not yet"
            last = e
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout} s waiting for {what}" + (f" ({last})" if last else ""))


# --- pki -------------------------------------------------------------------------------------------

def pki():
    d = p("pki")
    os.makedirs(d, exist_ok=True)

    def key(name):
        sh(["openssl", "genrsa", "-out", f"{d}/{name}.key", "2048"])

    key("ca")
    sh(["openssl", "req", "-x509", "-new", "-key", f"{d}/ca.key", "-subj", "/CN=flexvol-kube-ca",
        "-days", "3", "-out", f"{d}/ca.crt"])

    def cert(name, subj, usage, san=None):
        key(name)
        sh(["openssl", "req", "-new", "-key", f"{d}/{name}.key", "-subj", subj, "-out", f"{d}/{name}.csr"])
        ext = f"basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage={usage}\n"
        if san:
            ext += f"subjectAltName={san}\n"
        write(f"{d}/{name}.ext", ext)
        sh(["openssl", "x509", "-req", "-in", f"{d}/{name}.csr", "-CA", f"{d}/ca.crt", "-CAkey", f"{d}/ca.key",
            "-CAcreateserial", "-days", "3", "-extfile", f"{d}/{name}.ext", "-out", f"{d}/{name}.crt"])

    # 10.0.2.2: QEMU's user-mode gateway, the address the VM node (cases_vmnode.py) reaches it at
    cert("apiserver", "/CN=kube-apiserver", "serverAuth",
         "IP:127.0.0.1,IP:10.0.0.1,IP:10.0.2.2,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
         "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local")
    cert("apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client", "clientAuth")
    cert("admin", "/O=system:masters/CN=flexvol-kube-admin", "clientAuth")
    cert("kube-controller-manager", "/CN=system:kube-controller-manager", "clientAuth")
    cert("kube-scheduler", "/CN=system:kube-scheduler", "clientAuth")
    cert("kubelet", f"/O=system:nodes/CN=system:node:{NODE}", "clientAuth")
    cert("kubelet-serving", f"/CN={NODE}", "serverAuth", f"IP:127.0.0.1,DNS:{NODE}")
    key("sa")
    sh(["openssl", "rsa", "-in", f"{d}/sa.key", "-pubout", "-out", f"{d}/sa.pub"])
    for name in ("admin", "kube-controller-manager", "kube-scheduler", "kubelet"):
        write(p(f"{name}.kubeconfig"), f"""apiVersion: v1
kind: Config
clusters:
- name: flexvol-kube
  cluster:
    server: {API}
    certificate-authority: {d}/ca.crt
users:
- name: {name}
  user:
    client-certificate: {d}/{name}.crt
    client-key: {d}/{name}.key
contexts:
- name: flexvol-kube
  context: {{cluster: flexvol-kube, user: {name}}}
current-context: flexvol-kube
""", 0o600)


# --- processes -------------------------------------------------------------------------------------

def proc_exe(pid):
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def proc_children():
    kids = {}
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        try:
            with open(f"/proc/{e}/stat") as f:
                st = f.read()
            ppid = int(st[st.rindex(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(e))
    return kids


def descendants(pid):
    kids = proc_children()
    out, todo = [], [pid]
    while todo:
        x = todo.pop()
        for c in kids.get(x, []):
            out.append(c)
            todo.append(c)
    return out


def kill_pid(pid, name, timeout=20):
    """TERM, wait, KILL: one process, by pid."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            wp, _ = os.waitpid(pid, os.WNOHANG)
            if wp == pid:
                return
        except ChildProcessError:
            pass
        if not os.path.exists(f"/proc/{pid}") or _zombie(pid):
            return
        time.sleep(0.2)
    log(f"{name} (pid {pid}) ignored TERM for {timeout} s: KILL")
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def _zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            st = f.read()
        return st[st.rindex(")") + 2] == "Z"
    except OSError:
        return True


class Cluster:
    def __init__(self, bindir):
        self.bin = bindir
        self.procs = {}
        self.mode = None
        self.env = dict(os.environ)
        self.env.pop("KUBECONFIG", None)
        # The drivers' node-local paths, inherited by every driver call of kubelet and
        # kube-controller-manager (FLEXVOL_<KEY> overrides the config file key; attach_mode is
        # not overridden: it comes from the ConfigMap the installer copies to FLEXVOL_CONFIG).
        self.driver_env = {
            "FLEXVOL_CONFIG": p("etc", "flexvol.conf"),
            "FLEXVOL_LOOP_ROOT": p("flexvol", "loop"),
            "FLEXVOL_STATE_DIR": p("flexvol", "state"),
            "FLEXVOL_RUN_DIR": os.path.join(RUN, "flexvol"),
            # every call in the log (attach, isattached and init are otherwise quiet)
            "FLEXVOL_DEBUG": "1",
        }

    # -- helpers
    def b(self, name):
        return os.path.join(self.bin, name)

    def kubectl(self, *args, input=None, check=True, timeout=120):
        r = subprocess.run([self.b("kubectl"), "--kubeconfig", p("admin.kubeconfig"), *args],
                           input=input, capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: exit {r.returncode}: {r.stderr.strip()[-2000:]}")
        return r

    def kjson(self, *args, **kw):
        return json.loads(self.kubectl(*args, "-o", "json", **kw).stdout)

    def ctr(self, *args, check=True, timeout=120):
        return sh([self.b("ctr"), "--address", os.path.join(RUN, "containerd", "containerd.sock"),
                   "-n", "k8s.io", *args], check=check, timeout=timeout)

    def start(self, name, argv, extra_env=None):
        os.makedirs(p("logs"), exist_ok=True)
        os.makedirs(p("pids"), exist_ok=True)
        env = dict(self.env)
        env.update(extra_env or {})
        logf = open(p("logs", f"{name}.log"), "ab")
        logf.write(f"\n=== start {time.strftime('%H:%M:%S')}: {' '.join(argv)}\n".encode())
        logf.flush()
        pr = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                              env=env, start_new_session=True, cwd=BASE)
        logf.close()
        self.procs[name] = pr
        write(p("pids", f"{name}.pid"), f"{pr.pid} {argv[0]}\n")
        return pr

    def stop(self, name, timeout=20):
        pr = self.procs.pop(name, None)
        if pr is not None:
            kill_pid(pr.pid, name, timeout)
        try:
            os.unlink(p("pids", f"{name}.pid"))
        except FileNotFoundError:
            pass

    def alive(self, name):
        pr = self.procs.get(name)
        return pr is not None and pr.poll() is None

    def check_alive(self, *names):
        for n in names:
            if not self.alive(n):
                tail = ""
                try:
                    with open(p("logs", f"{n}.log"), errors="replace") as f:
                        tail = "".join(f.readlines()[-15:])
                except OSError:
                    pass
                raise RuntimeError(f"{n} is not running; its log ends:\n{tail}")

    def https_ok(self, url, cert=None):
        ctx = ssl.create_default_context(cafile=p("pki", "ca.crt"))
        if cert:
            ctx.load_cert_chain(p("pki", f"{cert}.crt"), p("pki", f"{cert}.key"))
        with urllib.request.urlopen(url, context=ctx, timeout=5) as r:
            return r.status == 200

    # -- components
    def start_etcd(self):
        self.start("etcd", [self.b("etcd"), "--name", "flexvol-kube", "--data-dir", p("etcd"),
                            "--listen-client-urls", "http://127.0.0.1:2379",
                            "--advertise-client-urls", "http://127.0.0.1:2379",
                            "--listen-peer-urls", "http://127.0.0.1:2380",
                            "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
                            "--initial-cluster", "flexvol-kube=http://127.0.0.1:2380",
                            "--listen-metrics-urls", "http://127.0.0.1:2381",
                            "--log-level", "warn"])

        def healthy():
            self.check_alive("etcd")
            with urllib.request.urlopen("http://127.0.0.1:2379/health", timeout=3) as r:
                return json.load(r).get("health") == "true"
        wait_for("etcd /health", healthy, 60)

    def start_apiserver(self):
        k = p("pki")
        self.start("kube-apiserver", [
            self.b("kube-apiserver"),
            "--etcd-servers=http://127.0.0.1:2379",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port=6443",
            f"--tls-cert-file={k}/apiserver.crt", f"--tls-private-key-file={k}/apiserver.key",
            f"--client-ca-file={k}/ca.crt",
            f"--kubelet-client-certificate={k}/apiserver-kubelet-client.crt",
            f"--kubelet-client-key={k}/apiserver-kubelet-client.key",
            # the node name resolves to 127.0.0.1 here (the kubelet listens there only); the VM
            # node (cases_vmnode.py) has only an InternalIP, 127.0.0.1, where QEMU forwards its
            # kubelet's port
            "--kubelet-preferred-address-types=Hostname,InternalIP",
            "--authorization-mode=Node,RBAC",
            # the default admission chain plus NodeRestriction, as kubeadm runs it
            "--enable-admission-plugins=NodeRestriction",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={k}/sa.pub",
            f"--service-account-signing-key-file={k}/sa.key",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            # the reconciler refuses a loopback advertise address; nothing here uses the
            # kubernetes service (no kube-proxy; in-cluster clients are told 127.0.0.1:6443)
            "--endpoint-reconciler-type=none",
            "--profiling=false",
            "--v=1",
        ])
        wait_for("kube-apiserver /readyz", lambda: self.check_alive("kube-apiserver") or
                 self.https_ok(f"{API}/readyz", "admin"), 120)

    def start_containerd(self):
        write(p("containerd", "config.toml"), containerd_config())
        # a pod network on a bridge that connects nothing: no gateway, no route, no NAT on the
        # host.  Pods that are not hostNetwork (the e2e suites') get eth0 with an address, which
        # containerd needs ("failed to find network info for sandbox" with loopback alone); the
        # bridge goes at teardown, the address records live under BASE.
        write(p("cni", "net.d", "10-flexvol-kube.conflist"), cni_config() + "\n")
        env = {"PATH": f"{self.bin}:/usr/sbin:/usr/bin:/sbin:/bin"}
        self.start("containerd", [self.b("containerd"), "--config", p("containerd", "config.toml")], env)
        wait_for("containerd", lambda: self.check_alive("containerd") or
                 self.ctr("version", check=False).returncode == 0, 60)

    def import_images(self, images_dir):
        for t in sorted(os.listdir(images_dir)):
            if t.endswith(".tar"):
                self.ctr("images", "import", "--local", os.path.join(images_dir, t), timeout=300)
        names = self.ctr("images", "ls", "-q").stdout.split()
        if PAUSE_IMAGE not in names:
            raise RuntimeError(f"{PAUSE_IMAGE} not imported: {names}")
        return names

    def start_kubelet(self):
        write(p("kubelet", "config.yaml"), kubelet_config())
        os.makedirs(p("plugins"), exist_ok=True)
        env = dict(self.driver_env, FLEXVOL_LOG_FILE=p("log", "kubelet-driver.log"))
        env["PATH"] = "/usr/sbin:/usr/bin:/sbin:/bin"
        self.start("kubelet", [self.b("kubelet"), f"--kubeconfig={p('kubelet.kubeconfig')}",
                               f"--config={p('kubelet', 'config.yaml')}", f"--root-dir={p('kubelet')}",
                               f"--hostname-override={NODE}", "--v=2"], env)

    def start_kcm(self, flex):
        k = p("pki")
        argv = [self.b("kube-controller-manager"), f"--kubeconfig={p('kube-controller-manager.kubeconfig')}",
                f"--authentication-kubeconfig={p('kube-controller-manager.kubeconfig')}",
                f"--authorization-kubeconfig={p('kube-controller-manager.kubeconfig')}",
                "--bind-address=127.0.0.1", "--secure-port=10257",
                f"--service-account-private-key-file={k}/sa.key", f"--root-ca-file={k}/ca.crt",
                "--use-service-account-credentials=true", "--leader-elect=false",
                "--controllers=*,-bootstrapsigner,-tokencleaner", "--v=2"]
        if flex:
            argv.append(f"--flex-volume-plugin-dir={p('plugins')}")
        env = dict(self.driver_env, FLEXVOL_LOG_FILE=p("log", "kcm-driver.log"))
        env["PATH"] = "/usr/sbin:/usr/bin:/sbin:/bin"
        self.start("kube-controller-manager", argv, env)
        self.kcm_flex = flex

    def restart_kcm(self, flex):
        self.stop("kube-controller-manager")
        self.start_kcm(flex)
        wait_for("kube-controller-manager /healthz", self._kcm_healthy, 60)

    def _kcm_healthy(self):
        self.check_alive("kube-controller-manager")
        ctx = ssl._create_unverified_context()  # its serving cert is self-signed
        with urllib.request.urlopen("https://127.0.0.1:10257/healthz", context=ctx, timeout=3) as r:
            return r.status == 200

    def restart_kubelet(self):
        self.stop("kubelet")
        self.start_kubelet()
        wait_for("kubelet /healthz", self._kubelet_healthy, 60)
        wait_for("node Ready after kubelet restart", self.node_ready, 120)

    def _kubelet_healthy(self):
        self.check_alive("kubelet")
        with urllib.request.urlopen("http://127.0.0.1:10248/healthz", timeout=3) as r:
            return r.status == 200

    def start_scheduler(self):
        self.start("kube-scheduler", [self.b("kube-scheduler"),
                                      f"--kubeconfig={p('kube-scheduler.kubeconfig')}",
                                      f"--authentication-kubeconfig={p('kube-scheduler.kubeconfig')}",
                                      f"--authorization-kubeconfig={p('kube-scheduler.kubeconfig')}",
                                      "--bind-address=127.0.0.1", "--secure-port=10259",
                                      "--leader-elect=false", "--v=1"])

    def node_ready(self):
        self.check_alive("kubelet", "containerd")
        n = self.kjson("get", "node", NODE)
        return any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))

    # -- whole cluster
    def up(self, images_dir, mode="controller"):
        t0 = time.monotonic()
        teardown(self.bin)
        os.makedirs(BASE, exist_ok=True)
        os.makedirs(RUN, exist_ok=True)
        # which of the fixed paths existed before: those are never removed at teardown
        write(p("preexisting"), "".join(f"{x}\n" for x in FIXED_PATHS + cgroup_parents() if os.path.lexists(x)))
        for d in ("log", "flexvol/loop", "flexvol/state", "etc", "plugins"):
            os.makedirs(p(d), exist_ok=True)
        pki()
        self.start_etcd()
        self.start_apiserver()
        self.start_containerd()
        imgs = self.import_images(images_dir)
        log(f"images: {' '.join(sorted(i for i in imgs if not i.startswith('sha256:')))}")
        self.start_kubelet()
        self.start_kcm(flex=(mode == "controller"))
        self.start_scheduler()
        wait_for("node Ready", self.node_ready, 180)
        # the default service account exists once the controller-manager's SA controller ran
        wait_for("default service account", lambda: self.kubectl(
            "get", "serviceaccount", "default", "-n", "default", check=False).returncode == 0, 60)
        log(f"up in {time.monotonic() - t0:.0f} s (node {NODE}, mode {mode})")

    def down(self):
        teardown(self.bin, self)


# --- node configuration (also written for the VM node of cases_vmnode.py, whose BASE and RUN
# have the same paths inside the guest) ------------------------------------------------------------

def containerd_config():
    c = os.path.join(RUN, "containerd")
    return f"""version = 3
root = "{p('containerd', 'root')}"
state = "{c}"
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.internal.v1.tracing",
                    "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile",
                    "io.containerd.snapshotter.v1.erofs"]

[grpc]
  address = "{c}/containerd.sock"

[ttrpc]
  address = "{c}/containerd.sock.ttrpc"

[debug]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{p('containerd', 'opt')}"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{PAUSE_IMAGE}"

[plugins."io.containerd.cri.v1.runtime"]
  # the host lacks CAP_SYS_RESOURCE: runc cannot lower a sandbox's oom_score_adj to -998
  restrict_oom_score_adj = true
  # pod network namespaces under RUN (not /run/netns): teardown unmounts what is under RUN
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "{p('cni', 'net.d')}"
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        Root = "{RUN}/runc"
        SystemdCgroup = false

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"""


def cni_config():
    """a pod network on a bridge that connects nothing (see Cluster.start_containerd)"""
    return json.dumps({
        "cniVersion": "1.0.0", "name": "flexvol-kube",
        "plugins": [{"type": "bridge", "bridge": CNI_BRIDGE, "isGateway": False,
                     "ipMasq": False,
                     "ipam": {"type": "host-local", "dataDir": p("cni", "ipam"),
                              "ranges": [[{"subnet": "10.244.0.0/24"}]]}}]})


def kubelet_config(address="127.0.0.1", port=10250, extra=""):
    k = p("pki")
    return f"""apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {address}
port: {port}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: {k}/kubelet-serving.crt
tlsPrivateKeyFile: {k}/kubelet-serving.key
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: false}}
  x509: {{clientCAFile: {k}/ca.crt}}
authorization:
  mode: AlwaysAllow
containerRuntimeEndpoint: unix://{RUN}/containerd/containerd.sock
# this host's cgroup layout is v1 (hybrid: tmpfs at /sys/fs/cgroup, cgroup2 only at .../unified);
# from v1.35 the kubelet refuses cgroup v1 unless told otherwise
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
evictionHard: {{}}
failSwapOn: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
podLogsDir: {p('pod-logs')}
volumePluginDir: {p('plugins')}
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
serializeImagePulls: false
volumeStatsAggPeriod: 0s
""" + extra


# --- teardown --------------------------------------------------------------------------------------

def mounts_under(prefixes):
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split()[4].encode().decode("unicode_escape")
            if any(mp == x or mp.startswith(x.rstrip("/") + "/") for x in prefixes):
                out.append(mp)
    return out


def _loops():
    """([(dev, what)] of the kubelet's pins, [(dev, backing file)] of ours): loop devices on files
    under BASE (the loop driver's), and the kubelet's own over those: for a raw block volume the
    kubelet binds a loop device to the volume's device node to pin it, through a bind mount it
    later removes, so its backing file reads "/" and only its backing inode (that of /dev/loopN)
    tells whose it is."""
    r = subprocess.run(["losetup", "--list", "--json", "-O", "NAME,BACK-FILE,BACK-INO,BACK-MAJ:MIN"],
                       capture_output=True, text=True)
    devs = json.loads(r.stdout or '{"loopdevices": []}')["loopdevices"] if r.returncode == 0 else []
    ours = [(d["name"], d["back-file"]) for d in devs if (d.get("back-file") or "").startswith(BASE + "/")]
    nodes = {}
    for name, _ in ours:
        try:
            st = os.stat(name)
            nodes[(f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}", str(st.st_ino))] = name
        except OSError:
            pass
    pins = [(d["name"], f"kubelet's pin of {nodes[k]}") for d in devs
            if (k := ((d.get("back-maj:min") or "").strip(), str(d.get("back-ino")))) in nodes]
    return pins, ours


def kubelet_pins():
    """The kubelet's loop devices over ours (_loops())."""
    return _loops()[0]


def our_loops():
    """Every loop device of the lane, the kubelet's pins first (_loops())."""
    pins, ours = _loops()
    return pins + ours


def release_loops():
    """Detach our_loops(), the kubelet's pins first (an autoclear device goes once they let go)."""
    for dev, back in our_loops():
        subprocess.run(["losetup", "-d", dev], capture_output=True)
        log(f"released {dev} ({back})")


def teardown(bindir, cl=None):
    """Stop and remove everything this lane starts or writes, whether the run that started it
    is this one (cl) or a crashed earlier one (pid files, processes running our binaries,
    mounts and loop devices under BASE/RUN). Never touches a process it did not start."""
    if not os.path.isdir(BASE) and not os.path.isdir(RUN):
        release_loops()
        return
    t0 = time.monotonic()
    kubectl = os.path.join(bindir, "kubectl")
    kcfg = p("admin.kubeconfig")

    def kc(*args, timeout=60):
        try:
            return subprocess.run([kubectl, "--kubeconfig", kcfg, *args], capture_output=True, text=True,
                                  timeout=timeout)
        except (OSError, subprocess.TimeoutExpired):
            return None

    # 1. Through the API while it answers: controllers first (they would re-create pods), then
    # every pod, gracefully, so that the kubelet unmounts volumes through the drivers.
    r = kc("get", "--raw", "/readyz", timeout=10)
    if r is not None and r.returncode == 0:
        kc("delete", "daemonsets,deployments,replicasets,statefulsets,jobs", "--all", "--all-namespaces",
           "--wait=false", timeout=60)
        kc("delete", "pods", "--all", "--all-namespaces", "--grace-period=5", "--timeout=90s", timeout=120)
        # the kubelet unmounts after the pods are gone: wait for its pod dirs to empty
        end = time.monotonic() + 60
        # (the kubelet bind-mounts its root dir onto itself: that one stays until the end)
        while time.monotonic() < end and [m for m in mounts_under([p("kubelet")]) if m != p("kubelet")]:
            time.sleep(1)
        kc("delete", "pvc", "--all", "--all-namespaces", "--wait=false", timeout=30)

    log(f"teardown: API objects gone ({time.monotonic() - t0:.0f} s)")
    # 2. Our processes: pid files first (kubelet before containerd before the control plane),
    # then anything still running one of our binaries (a crashed run's, or a shim).
    order = ["kubelet", "kube-scheduler", "kube-controller-manager"]
    for name in order:
        _stop_pidfile(name, bindir, cl)
    sock = os.path.join(RUN, "containerd", "containerd.sock")
    ctr = os.path.join(bindir, "ctr")
    if os.path.exists(sock) and os.path.exists(ctr):
        def c(*a):
            try:
                return subprocess.run([ctr, "--address", sock, "-n", "k8s.io", *a], capture_output=True,
                                      text=True, timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                return None
        r = c("tasks", "ls", "-q")
        for t in (r.stdout.split() if r and r.returncode == 0 else []):
            c("tasks", "kill", "-s", "SIGKILL", t)
        for t in (r.stdout.split() if r and r.returncode == 0 else []):
            for _ in range(20):
                d = c("tasks", "delete", t)
                if d is None or d.returncode == 0 or "not found" in d.stderr:
                    break
                time.sleep(0.5)
        r = c("containers", "ls", "-q")
        for t in (r.stdout.split() if r and r.returncode == 0 else []):
            c("containers", "delete", t)
    for name in ["containerd", "kube-apiserver", "etcd"]:
        _stop_pidfile(name, bindir, cl)
    # Shims (they outlive containerd) and their children, then any process of ours left.
    ours = {os.path.join(bindir, n) for n in ("containerd-shim-runc-v2", "containerd", "kubelet",
                                               "kube-apiserver", "kube-controller-manager",
                                               "kube-scheduler", "etcd")}
    for e in os.listdir("/proc"):
        if e.isdigit() and proc_exe(int(e)) in ours:
            pid = int(e)
            for d in descendants(pid):
                try:
                    os.kill(d, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            log(f"stray {proc_exe(pid)} (pid {pid}): stopped")
            kill_pid(pid, "stray", 10)

    log(f"teardown: processes stopped ({time.monotonic() - t0:.0f} s)")
    # 3. Mounts under our dirs (pod volumes, sandbox shm, overlay rootfs), deepest first; then
    # loop devices whose backing file is ours.
    for _ in range(3):
        ms = mounts_under([BASE, RUN])
        if not ms:
            break
        for mp in sorted(set(ms), key=len, reverse=True):
            if subprocess.run(["umount", mp], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", mp], capture_output=True)
    release_loops()

    if os.path.exists(f"/sys/class/net/{CNI_BRIDGE}"):
        subprocess.run(["ip", "link", "delete", CNI_BRIDGE], capture_output=True)
        log(f"removed the pod network bridge {CNI_BRIDGE}")

    # 4. cgroups runc made for our containers (cgroupfs driver, cgroupsPerQOS off: one
    # directory per container id, under each v1 hierarchy and the unified one).
    _remove_container_cgroups()

    # 5. Files: our dirs (only once nothing is mounted below them) and the fixed paths the
    # kubelet and containerd write, when this lane created them.
    left = mounts_under([BASE, RUN])
    if left:
        raise RuntimeError(f"teardown: still mounted: {left}")
    pre = set()
    try:
        with open(p("preexisting")) as f:
            pre = {x.strip() for x in f if x.strip()}
        known = True
    except OSError:
        known = False
    if known:
        _remove_cgroups(pre)
        for x in FIXED_PATHS:
            if x not in pre and os.path.lexists(x):
                if mounts_under([x]):
                    raise RuntimeError(f"teardown: still mounted under {x}")
                shutil.rmtree(x, ignore_errors=True)
    shutil.rmtree(RUN, ignore_errors=True)
    shutil.rmtree(BASE, ignore_errors=True)
    log(f"teardown: done ({time.monotonic() - t0:.0f} s)")


def _stop_pidfile(name, bindir, cl):
    if cl is not None and name in cl.procs:
        cl.stop(name)
        return
    try:
        with open(p("pids", f"{name}.pid")) as f:
            pid_s, exe = f.read().split()[:2]
        pid = int(pid_s)
    except (OSError, ValueError):
        return
    if proc_exe(pid) == exe:  # still the process we started, not a reused pid
        kill_pid(pid, name)
    try:
        os.unlink(p("pids", f"{name}.pid"))
    except FileNotFoundError:
        pass


def cgroup_parents():
    """containerd's cgroup parent for the k8s.io namespace in every hierarchy (cgroupfs)."""
    try:
        return [os.path.join("/sys/fs/cgroup", h, "k8s.io") for h in sorted(os.listdir("/sys/fs/cgroup"))]
    except OSError:
        return []


def _remove_cgroups(pre):
    for d in cgroup_parents():
        if d in pre or not os.path.isdir(d):
            continue
        for dirpath, _, _ in os.walk(d, topdown=False):
            try:
                os.rmdir(dirpath)  # only empty cgroups (no process left) can go
            except OSError as e:
                log(f"cgroup {dirpath}: {e}")


def _remove_container_cgroups():
    ids = set()
    for root in (os.path.join(RUN, "runc", "k8s.io"),):
        if os.path.isdir(root):
            ids.update(os.listdir(root))
    try:
        with open(p("container-ids")) as f:
            ids.update(x.strip() for x in f if x.strip())
    except OSError:
        pass
    if not ids:
        return
    for hier in os.listdir("/sys/fs/cgroup"):
        top = os.path.join("/sys/fs/cgroup", hier)
        for dirpath, dirnames, _ in os.walk(top, topdown=False):
            if os.path.basename(dirpath) in ids:
                try:
                    os.rmdir(dirpath)
                except OSError:
                    pass


def record_container_ids(cl):
    """Remember every container id (for cgroup cleanup after a crash)."""
    r = cl.ctr("containers", "ls", "-q", check=False)
    if r.returncode == 0:
        with open(p("container-ids"), "a") as f:
            f.write(r.stdout)


def default_bindir():
    return subprocess.run([os.path.join(HERE, "build"), "--print"], capture_output=True, text=True,
                          check=True).stdout.strip().splitlines()[-1]


def main():
    args = sys.argv[1:]
    if not args or args[0] not in ("up", "down", "kubectl"):
        print(__doc__)
        return 2
    bindir = os.environ.get("FLEXVOL_KUBE_BIN") or default_bindir()
    cl = Cluster(bindir)
    if args[0] in ("up", "down"):
        lock = take_lock()  # noqa: F841 - held until exit
    if args[0] == "down":
        teardown(bindir)
        return 0
    if args[0] == "kubectl":
        r = subprocess.run([cl.b("kubectl"), "--kubeconfig", p("admin.kubeconfig"), *args[1:]])
        return r.returncode
    mode = "controller"
    if "--mode" in args:
        mode = args[args.index("--mode") + 1]
    images = os.environ.get("FLEXVOL_KUBE_IMAGES", os.path.join(ROOT, "build", "kube-images"))
    try:
        cl.up(images, mode)
    except BaseException:
        teardown(bindir, cl)
        raise
    # leave it running: detach our children (they have their own sessions)
    log("running; stop it with: python3 tests/kube/cluster.py down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
