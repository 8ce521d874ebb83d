#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The VM guest as a node of the cluster lane: runs inside the guest (tests/vm/run), started by
tests/kube/cases_vmnode.py on the host.

    tests/vm/run --nic user,hostfwd=... WORKSPACE -- /usr/bin/python3 tests/kube/vmnode_guest.py NODEDIR

NODEDIR (in the workspace, shared with the host over 9p) holds what the host prepared:
node.json (name, binaries, BASE, RUN, kubelet port, images, the drivers' environment) and base/
(certificates, kubeconfig, kubelet and containerd configs, laid out as under BASE). This program
starts, in the guest: the VM lane's fixtures (kernel NFS server, tgt iSCSI target, iscsid:
tests/vm/fixtures), a cgroup2 hierarchy, BASE on a tmpfs (containerd's overlay snapshots need a
filesystem that can be an overlay's upper layer), containerd with the lane's images imported,
and the kubelet, which joins the control plane on the host through QEMU's gateway; node.json's
"relays" (the two-node set: tests/kube/cases_multinode.py) forward a port of the guest's 127.0.0.1
to an address beyond it, before the fixtures start. Then it serves
the host's requests (a command to run in the guest, a kubelet restart, a kubelet stop and start
with the pods' containers left running, stop) through files in
NODEDIR/rpc: N.req (JSON) -> N.res (JSON), each written under another name and renamed.
On `stop` it stops the kubelet and containerd, unmounts BASE and checks that nothing is left
(mounts of pods, iSCSI sessions and node records, loop devices); the guest then powers off.
Component logs go to NODEDIR/logs (the host keeps them).
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sim"))
from flexsim import mounts  # noqa: E402 - (mount point, source, fstype, options, root)

T0 = time.monotonic()


def log(msg):
    print(f"vmnode: [{time.monotonic() - T0:6.1f}] {msg}", flush=True)


def sh(argv, timeout=120, check=True, **kw):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {r.returncode}: {(r.stderr or r.stdout).strip()[-1500:]}")
    return r


def wait_for(what, fn, timeout, interval=0.2):
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        try:
            if fn():
                return
        except Exception as e:  # noqa: BLE001 - anything means "not yet"
            last = e
        time.sleep(interval)
    raise TimeoutError(f"{what}: not within {timeout} s" + (f" ({last})" if last else ""))


class Node:
    def __init__(self, nodedir):
        self.dir = nodedir
        with open(os.path.join(nodedir, "node.json")) as f:
            self.cfg = json.load(f)
        self.base = self.cfg["base"]
        self.run = self.cfg["run"]
        self.bin = self.cfg["bin"]
        self.logdir = os.path.join(nodedir, "logs")
        self.procs = {}
        os.makedirs(self.logdir, exist_ok=True)
        os.makedirs(os.path.join(nodedir, "rpc"), exist_ok=True)

    def b(self, name):
        return os.path.join(self.bin, name)

    def p(self, *parts):
        return os.path.join(self.base, *parts)

    def start(self, name, argv, env):
        logf = open(os.path.join(self.logdir, f"{name}.log"), "ab")
        logf.write(f"\n=== start {time.strftime('%H:%M:%S')}: {' '.join(argv)}\n".encode())
        logf.flush()
        self.procs[name] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf,
                                            stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                            cwd=self.base)
        logf.close()

    def stop(self, name, timeout=30):
        pr = self.procs.pop(name, None)
        if pr is None or pr.poll() is not None:
            return
        pr.terminate()
        try:
            pr.wait(timeout)
        except subprocess.TimeoutExpired:
            log(f"{name} ignored TERM for {timeout} s: KILL")
            pr.kill()
            pr.wait()

    def alive(self, name):
        pr = self.procs.get(name)
        if pr is None or pr.poll() is not None:
            raise RuntimeError(f"{name} is not running (see {self.logdir}/{name}.log)")
        return True

    # -- bring-up
    def relays(self):
        """node.json's "relays": [[listen_port, to_host, to_port], ...]: 127.0.0.1:listen_port in the
        guest forwarded to to_host:to_port (the cluster lane's two-node set: the iSCSI target on the
        host, reached through QEMU's gateway at the same portal address on every node)"""
        for port, host, to in self.cfg.get("relays", []):
            srv = socket.socket()
            srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            srv.bind(("127.0.0.1", port))
            srv.listen(16)
            threading.Thread(target=self._relay_accept, args=(srv, host, to), daemon=True).start()

    @staticmethod
    def _relay_accept(srv, host, to):
        def pump(a, b):
            try:
                while True:
                    data = a.recv(65536)
                    if not data:
                        break
                    b.sendall(data)
            except OSError:
                pass
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        while True:
            c, _ = srv.accept()
            try:
                u = socket.create_connection((host, to), timeout=10)
                u.settimeout(None)
            except OSError:
                c.close()
                continue
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=pump, args=(a, b), daemon=True).start()

    def fixtures(self):
        env = dict(os.environ)
        env.update(self.cfg.get("fixtures_env", {}))
        r = sh(["tests/vm/fixtures", "start"], timeout=300, env=env)
        log(r.stdout.strip().replace("\n", "; "))

    def cgroups(self):
        # cgroup v2, as systemd would mount it; the controllers runc and the kubelet use enabled
        # for the children of the root
        sh(["mount", "-t", "cgroup2", "-o", "nosuid,nodev,noexec", "cgroup2", "/sys/fs/cgroup"])
        with open("/sys/fs/cgroup/cgroup.controllers") as f:
            have = f.read().split()
        want = [c for c in ("cpuset", "cpu", "io", "memory", "pids", "hugetlb") if c in have]
        with open("/sys/fs/cgroup/cgroup.subtree_control", "w") as f:
            f.write(" ".join("+" + c for c in want))
        # the kubelet's mounts must propagate (it checks that its root dir is shared), as under
        # systemd, which makes / shared
        sh(["mount", "--make-rshared", "/"])

    def layout(self):
        os.makedirs(self.base, exist_ok=True)
        sh(["mount", "-t", "tmpfs", "-o", "mode=0755", "flexvol-kube-node", self.base])
        shutil.copytree(os.path.join(self.dir, "base"), self.base, dirs_exist_ok=True)
        for d in self.cfg.get("dirs", []):
            os.makedirs(self.p(d), exist_ok=True)
        os.makedirs(self.run, exist_ok=True)
        os.chmod(os.path.join(self.base, "pki"), 0o700)

    def containerd(self):
        env = {"PATH": f"{self.bin}:/usr/sbin:/usr/bin:/sbin:/bin"}
        self.start("containerd", [self.b("containerd"), "--config", self.p("containerd", "config.toml")], env)
        sock = os.path.join(self.run, "containerd", "containerd.sock")
        wait_for("containerd", lambda: self.alive("containerd") and
                 sh([self.b("ctr"), "--address", sock, "version"], check=False).returncode == 0, 120, 0.5)
        for tar in self.cfg["images"]:
            sh([self.b("ctr"), "--address", sock, "-n", "k8s.io", "images", "import", "--local", tar], timeout=600)

    def kubelet(self):
        env = dict(self.cfg["driver_env"])
        env["PATH"] = "/usr/sbin:/usr/bin:/sbin:/bin"
        self.start("kubelet", [self.b("kubelet"), *self.cfg["kubelet_args"]], env)
        wait_for("kubelet /healthz", lambda: self.alive("kubelet") and sh(
            ["python3", "-c", "import urllib.request,sys; urllib.request.urlopen("
             f"'http://127.0.0.1:{self.cfg['healthz_port']}/healthz', timeout=3)"],
            check=False).returncode == 0, 300, 1)

    def up(self):
        steps = [("relays", self.relays), ("fixtures", self.fixtures), ("cgroups", self.cgroups), ("layout", self.layout),
                 ("containerd", self.containerd), ("kubelet", self.kubelet)]
        times = {}
        for name, fn in steps:
            t = time.monotonic()
            fn()
            times[name] = round(time.monotonic() - t, 1)
            log(f"{name} up in {times[name]} s")
        return times

    # -- teardown
    def down(self):
        report = {}
        self.stop("kubelet")
        sock = os.path.join(self.run, "containerd", "containerd.sock")
        ctr = [self.b("ctr"), "--address", sock, "-n", "k8s.io"]
        if "containerd" in self.procs:
            tasks = sh(ctr + ["tasks", "ls", "-q"], check=False).stdout.split()
            for t in tasks:
                sh(ctr + ["tasks", "kill", "-s", "SIGKILL", t], check=False)
            for t in tasks:
                for _ in range(20):
                    if sh(ctr + ["tasks", "delete", t], check=False).returncode == 0:
                        break
                    time.sleep(0.5)
            for c in sh(ctr + ["containers", "ls", "-q"], check=False).stdout.split():
                sh(ctr + ["containers", "delete", c], check=False)
            report["containers_left_at_stop"] = tasks
        self.stop("containerd")
        # what the pods' volumes left (the host deleted the pods first: the kubelet unmounted them)
        report["volume_mounts"] = [m[:3] for m in mounts() if m[2] in ("nfs", "nfs4") or m[1].startswith("/dev/sd")]
        report["iscsi_sessions"] = sorted(os.listdir("/sys/class/iscsi_session")) \
            if os.path.isdir("/sys/class/iscsi_session") else []
        report["iscsi_node_records"] = sorted(os.listdir("/etc/iscsi/nodes")) if os.path.isdir("/etc/iscsi/nodes") else []
        report["loop_devices"] = [d for d in os.listdir("/sys/block") if os.path.exists(f"/sys/block/{d}/loop")]
        # then what the node itself mounted: containers' rootfs, shm, netns, the kubelet's root
        for _ in range(3):
            ms = [m[0] for m in mounts() if m[0] == self.base or m[0].startswith(self.base + "/") or
                  m[0].startswith(self.run + "/")]
            if not ms:
                break
            for mp in sorted(set(ms), key=len, reverse=True):
                if sh(["umount", mp], check=False).returncode != 0:
                    sh(["umount", "-l", mp], check=False)
        report["node_mounts_left"] = [m[0] for m in mounts() if m[0].startswith(self.base) or
                                      m[0].startswith(self.run + "/")]
        left = []
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    exe = os.readlink(f"/proc/{pid}/exe")
                except OSError:
                    continue
                if exe.startswith(self.bin + "/"):
                    left.append(f"{pid} {exe}")
        report["processes_left"] = left
        drv = self.cfg["driver_env"].get("FLEXVOL_LOG_FILE")
        if drv and os.path.exists(drv):
            shutil.copy(drv, os.path.join(self.logdir, "kubelet-driver.log"))
        return report

    # -- requests from the host
    def serve(self):
        rpc = os.path.join(self.dir, "rpc")
        while True:
            try:
                reqs = sorted((x for x in os.listdir(rpc) if x.endswith(".req")), key=lambda x: int(x.split(".")[0]))
            except (OSError, ValueError):
                reqs = []
            if not reqs:
                time.sleep(0.1)
                continue
            for r in reqs:
                path = os.path.join(rpc, r)
                try:
                    with open(path) as f:
                        req = json.load(f)
                except (OSError, ValueError):
                    continue  # not complete yet (renamed into place: should not happen)
                os.unlink(path)
                res = self.handle(req)
                out = os.path.join(rpc, r[:-4] + ".res")
                with open(out + ".tmp", "w") as f:
                    json.dump(res, f)
                os.rename(out + ".tmp", out)
                if req.get("op") == "stop":
                    return res

    def handle(self, req):
        op = req.get("op", "exec")
        t = time.monotonic()
        try:
            if op == "exec":
                r = subprocess.run(req["argv"], input=req.get("input"), capture_output=True, text=True,
                                   timeout=req.get("timeout", 120), env=dict(os.environ, **req.get("env", {})))
                res = {"rc": r.returncode, "stdout": r.stdout, "stderr": r.stderr}
            elif op == "read":
                with open(req["path"], "rb") as f:
                    f.seek(req.get("offset", 0))
                    data = f.read()
                res = {"rc": 0, "stdout": data.decode(errors="replace"), "size": req.get("offset", 0) + len(data)}
            elif op == "restart-kubelet":
                self.stop("kubelet")
                self.kubelet()
                res = {"rc": 0}
            elif op == "stop-kubelet":     # the node partitioned: its pods' containers go on
                self.stop("kubelet")
                res = {"rc": 0}
            elif op == "start-kubelet":
                self.kubelet()
                res = {"rc": 0}
            elif op == "stop":
                res = {"rc": 0, "report": self.down()}
            else:
                res = {"rc": 2, "stderr": f"unknown op {op}"}
        except subprocess.TimeoutExpired as e:
            res = {"rc": 124, "stderr": f"timed out after {e.timeout} s"}
        except Exception as e:  # noqa: BLE001 - reported to the host, the guest stays up
            res = {"rc": 1, "stderr": f"{type(e).__name__}: {e}"}
        res["seconds"] = round(time.monotonic() - t, 2)
        return res


def main():
    node = Node(sys.argv[1])
    status = os.path.join(node.dir, "status")
    try:
        times = node.up()
    except Exception as e:  # noqa: BLE001 - the host reads it
        log(f"FAILED: {e}")
        with open(status + ".tmp", "w") as f:
            json.dump({"state": "failed", "error": str(e)}, f)
        os.rename(status + ".tmp", status)
        node.down()
        return 1
    with open(status + ".tmp", "w") as f:
        json.dump({"state": "up", "times": times, "uptime": float(open("/proc/uptime").read().split()[0])}, f)
    os.rename(status + ".tmp", status)
    res = node.serve()
    rep = res.get("report", {})
    bad = {k: v for k, v in rep.items() if v and k != "containers_left_at_stop"}
    log(f"stopped; left behind: {bad or 'nothing'}")
    return 1 if bad else 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main())
