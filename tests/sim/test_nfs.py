"""Host-lane cases for the nfs driver (tests/sim/run.py imports every test_<driver>.py).

This kernel has no NFS client, so these cases cover everything up to the kernel
mount: init and the Not-supported slots, refusal of every kind of bad input
before anything runs, what reaches /sbin/mount.nfs, helper failures and the
deadline with a helper that never returns, and the unmount ladder (normal ->
forced -> lazy) on mounts this kernel can make.  The real protocol work is
tested against a kernel NFS server in the VM lane (tests/vm/t-nfs-*).

A fake /sbin/mount.nfs is used only for what a real server cannot produce on
demand (a helper that hangs forever, a scripted refusal, recording argv).  libmount
finds helpers on a fixed path, so the fake is put in place with an overlayfs on
/usr/sbin inside run.py's private mount namespace (docs/test-lanes.md §4): the host
never sees it.
"""
import base64
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time

from flexsim import (Driver, Kubelet, case_registry, check, cleanup, dead, in_parallel, mounted_at,
                     mounts, mounts_under)

DRIVER = "nfs"
CASES, case = case_registry()





FAKE = r"""#!/bin/sh
# fake /sbin/mount.nfs (tests/sim/test_nfs.py): records its argv, then acts per $d/mode
d=%(dir)s
echo "$*" >>"$d/calls"
case "$(cat "$d/mode" 2>/dev/null)" in
hang)
    cat /proc/$$/environ >"$d/environ"
    sleep 1000 &
    echo $! >"$d/grandchild"
    echo $$ >"$d/helper"
    exec sleep 1000 ;;
deny)
    echo "mount.nfs: access denied by server while mounting $1"
    exit 32 ;;
chatty)
    echo "to stdout"
    echo "to stderr" >&2
    echo "mount.nfs: Connection refused" >&2
    exit 32 ;;
*)
    echo "mount.nfs: fake helper refuses (recording only)"
    exit 32 ;;
esac
"""


class NfsEnv:
    """One case's world: scratch dirs, the nfs driver, the kubelet, an optional fake helper."""

    def __init__(self, build, name):
        self.dir = tempfile.mkdtemp(prefix="flexsim-nfs-%s." % name, dir="/tmp")
        self.log = os.path.join(self.dir, "log", "nfs.log")
        self.kubelet = os.path.join(self.dir, "kubelet")
        os.makedirs(self.kubelet)
        self.env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "FLEXVOL_CONFIG": "/dev/null",
                    "FLEXVOL_STATE_DIR": os.path.join(self.dir, "state"),
                    "FLEXVOL_RUN_DIR": os.path.join(self.dir, "run"), "FLEXVOL_LOG_FILE": self.log}
        for k in ("ASAN_OPTIONS", "UBSAN_OPTIONS"):
            if os.environ.get(k) is not None:
                self.env[k] = os.environ[k]
        self.bin = os.path.join(build, "nfs")
        self.drv = Driver(self.bin, self.env)
        self.k = Kubelet(self.drv, self.kubelet, os.uname().nodename)
        self.fake_dir = None

    def opts(self, server="127.0.0.1", share="/exports/vol", ro=False, pod=None, secrets=None, **user):
        u = {"server": server, "share": share}
        u.update(user)
        return self.k.options("vol", {k: v for k, v in u.items() if v is not None}, ro=ro, pod=pod,
                              secrets=secrets)

    def fake_helper(self, mode="record"):
        if not self.fake_dir:
            self.fake_dir = os.path.join(self.dir, "fake")
            upper, work = os.path.join(self.fake_dir, "upper"), os.path.join(self.fake_dir, "work")
            os.makedirs(upper)
            os.makedirs(work)
            with open(os.path.join(upper, "mount.nfs"), "w") as f:
                f.write(FAKE % {"dir": self.fake_dir})
            os.chmod(os.path.join(upper, "mount.nfs"), 0o755)
            subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                            "lowerdir=/usr/sbin,upperdir=%s,workdir=%s" % (upper, work), "/usr/sbin"],
                           check=True)
        with open(os.path.join(self.fake_dir, "mode"), "w") as f:
            f.write(mode)

    def helper_calls(self):
        try:
            with open(os.path.join(self.fake_dir, "calls")) as f:
                return f.read().splitlines()
        except (OSError, TypeError):
            return []

    def read_log(self):
        try:
            with open(self.log) as f:
                return f.read()
        except OSError:
            return ""

    def close(self):
        if self.fake_dir:
            top = [m for m in mounts() if m[0] == "/usr/sbin"]
            if top and top[-1][2] == "overlay":
                subprocess.run(["umount", "/usr/sbin"], check=False)
        ok = cleanup(self.dir)
        shutil.rmtree(self.dir, ignore_errors=True)
        return ok


def make_env(build, name):
    return NfsEnv(build, name)


# --- cases ----------------------------------------------------------------------

@case
def nfs_init_capabilities(e):
    """init: Success with every capability explicit; no relabel, no chown, no stats, no resize."""
    r = e.drv.call("init", expect="Success", env={})
    check(r["capabilities"] == {"attach": False, "selinuxRelabel": False, "supportsMetrics": False,
                                "fsGroup": False, "requiresFSResize": False}, r["capabilities"])


@case
def nfs_attach_side_not_supported(e):
    """attach:false: every attach-side op is answered Not supported by the dispatcher."""
    o = e.opts()
    n = e.k.node
    for args in (("attach", o, n), ("isattached", o, n), ("detach", "vol", n),
                 ("waitforattach", "/dev/x", o), ("mountdevice", "/x", "/dev/x", o),
                 ("unmountdevice", "/x"), ("expandfs", o, "", "/x", "2", "1"),
                 ("getvolumename", o), ("expandvolume", o, "/x", "2", "1")):
        e.drv.call(*args, expect="Not supported")
        e.drv.call(*args, expect="Not supported", env={})
    r = e.drv.call("mount", "/x", expect="Failure")
    check("argument" in r["message"], r["message"])
    r = e.drv.call("unmount", expect="Failure")
    check("argument" in r["message"], r["message"])


def refused(e, opts, words):
    """A bad option: Failure naming it, mount.nfs never started, nothing mounted."""
    e.fake_helper("record")
    before = len(e.helper_calls())
    r = e.k.mount("pod-a", "vol", opts, expect="Failure")
    check(any(w in r["message"] for w in words), "message %r lacks %r" % (r["message"], words))
    check(len(e.helper_calls()) == before, "mount.nfs ran for bad input: %r" % e.helper_calls())
    check(not mounts_under(e.dir), "something got mounted")
    return r


@case
def nfs_bad_server(e):
    for s in ("a,b", "a b", "a=b", "host:x", "::1", "fd00::1", "[::1", "[zz::1]", "[::1]:2049",
              "[fe80::1%eth0]", "-oremount", "a..b", "-a.b", "a-.b", "x" * 64 + ".com", "1.2.3",
              "1.2.3.256", "h\u00f6st", "host/path", "127.0.0.1,vers=3", "h\tx", "host\n"):
        refused(e, e.opts(server=s), ["option 'server'"])
    refused(e, e.opts(server=None), ["'server' is required"])
    refused(e, e.opts(server=""), ["'server' is required"])
    r = e.k.mount("pod-a", "vol", '{"server":5,"share":"/x"}', expect="Failure")
    check("'server' must be a string" in r["message"], r["message"])


@case
def nfs_bad_share_and_subpath(e):
    for s in ("exports", "", "/a,b", "/a b", "/a=b", "/a:b", "/a/../b", "/..", "/a//b", "/./a",
              "/a\"b", "/a'b", "/a\\b", "/a\u00e9", "/a\nb", "/" + "x" * 1100):
        if s == "":
            refused(e, e.opts(share=s), ["'share' is required"])
        else:
            refused(e, e.opts(share=s), ["option 'share'"])
    for s in ("../x", "a/../../x", "/abs", "a//b", "./a", "a,b", "a b", "a=b", "a:b", "..", "a/.."):
        refused(e, e.opts(subPath=s), ["option 'subPath'"])


@case
def nfs_bad_version_and_mount_options(e):
    for v in ("2", "5", "4.3", "v4", "4.", "4,nolock", "3 ", "4.2,sec=none"):
        refused(e, e.opts(nfsVersion=v), ["option 'nfsVersion'"])
    for mo in ("suid", "dev", "exec", "rw", "nosuid,suid", "nodev,soft,dev"):
        refused(e, e.opts(mountOptions=mo), ["not allowed"])
    for mo in ("vers=3", "nfsvers=4", "minorversion=1", "v4"):
        refused(e, e.opts(mountOptions=mo), ["nfsVersion"])
    for mo in ("soft,,hard", ",soft", "soft,", ""[:0] + ","):
        refused(e, e.opts(mountOptions=mo), ["empty entry"])
    for mo in ("timeo=abc", "timeo=", "timeo", "timeo=-1", "timeo=1 0", "rsize=99999999999",
               "soft=1", "sec=krb6", "proto=tcp;x", "proto=", "lookupcache=|all|", "sec=sys|krb5"):
        refused(e, e.opts(mountOptions=mo), ["bad value"])
    for mo in ("bind", "remount", "loop", "context=system_u:object_r:nfs_t", "x-mount.mkdir", "_netdev",
               "clientaddr=1.2.3.4", "fsc", "a b", "nosuid nodev", "noauto", "user", "owner", "defaults"):
        refused(e, e.opts(mountOptions=mo), ["not in the allowed list", "bad value"])
    refused(e, e.opts(mountOptions="x" * 600), ["too long"])


@case
def nfs_options_reach_the_helper(e):
    """What mount.nfs is asked (recorded by the fake, which then refuses): exact source,
    nosuid,nodev always, the version, the user's options, ro last."""
    e.fake_helper("record")
    d = e.k.poddir("pod-a", "vol")
    cases = [
        (e.opts(nfsVersion="4.2"), "127.0.0.1:/exports/vol", ["nosuid", "nodev", "vers=4.2"], []),
        (e.opts(share="/exports/vol/", subPath="a/b/", nfsVersion="3"), "127.0.0.1:/exports/vol/a/b",
         ["vers=3"], ["ro"]),
        (e.opts(share="/", subPath="top"), "127.0.0.1:/top", [], ["ro"]),
        (e.opts(server="[fd00::5]", share="/x"), "[fd00::5]:/x", [], []),
        (e.opts(server="nfs-1.example.com", share="/x", ro=True), "nfs-1.example.com:/x", ["ro"], []),
        (e.opts(mountOptions="soft,timeo=50,retrans=2,proto=tcp,sec=sys,nconnect=4,noatime,noexec,lookupcache=pos",
                nfsVersion="4.1"), "127.0.0.1:/exports/vol",
         ["soft", "timeo=50", "retrans=2", "proto=tcp", "sec=sys", "nconnect=4", "noatime", "noexec",
          "lookupcache=pos", "vers=4.1"], ["ro"]),
        (e.opts(mountOptions="ro"), "127.0.0.1:/exports/vol", ["ro"], []),
    ]
    for opts, src, want, unwanted in cases:
        r = e.k.mount("pod-a", "vol", opts, expect="Failure")
        check("recording only" in r["message"], r["message"])
        argv = e.helper_calls()[-1].split()
        check(argv[0] == src and argv[1] == d, "helper argv %r, want %s %s" % (argv, src, d))
        check("-o" in argv[2:-1], argv)
        check("-n" in argv, "libmount must tell the helper not to write utab: %r" % argv)
        o = argv[argv.index("-o") + 1].split(",")
        for w in ["nosuid", "nodev"] + want:
            check(w in o, "helper options %r lack %s" % (argv, w))
        for w in unwanted:
            check(w not in o, "helper options %r have %s" % (argv, w))
        check("suid" not in o and "dev" not in o, argv)
    check(not mounts_under(e.dir), "nothing mounted")


@case
def nfs_helper_failure_reaches_message_and_log(e):
    """mount.nfs' own words end up in the reply and the log; its chatter on stdout and
    stderr never reaches kubelet's combined output (Driver.call checks)."""
    e.fake_helper("deny")
    secret = "hunter2-S3cret"
    o = e.opts(pod="pod-a", secrets={"password": secret})
    r = e.k.mount("pod-a", "vol", o, expect="Failure")
    check("access denied by server" in r["message"] and "127.0.0.1:/exports/vol" in r["message"], r["message"])
    e.fake_helper("chatty")
    r = e.k.mount("pod-a", "vol", o, expect="Failure")
    check("Connection refused" in r["message"], r["message"])
    log = e.read_log()
    check("  | mount.nfs: access denied by server" in log and "  | to stderr" in log, log[-2000:])
    check(secret not in log and base64.b64encode(secret.encode()).decode() not in log, "secret in the log")
    check(os.path.isdir(e.k.poddir("pod-a", "vol")) and not os.listdir(e.k.poddir("pod-a", "vol")), "dir empty")


@case
def nfs_helper_timeout_kills_the_group(e):
    """A mount.nfs that never returns: Failure at FLEXVOL_MOUNT_TIMEOUT, the helper and
    what it started killed with its process group, the dir left unmounted."""
    e.fake_helper("hang")
    env = dict(e.env, FLEXVOL_MOUNT_TIMEOUT="2")
    t0 = time.monotonic()
    os.makedirs(e.k.poddir("pod-a", "vol"))
    r = e.drv.call("mount", e.k.poddir("pod-a", "vol"), e.opts(), env=env, expect="Failure")
    dt = time.monotonic() - t0
    check(1.9 < dt < 8, "took %.2f s with a 2 s deadline" % dt)
    check("did not finish within 2 s" in r["message"], r["message"])
    pids = []
    for f in ("helper", "grandchild"):
        with open(os.path.join(e.fake_dir, f)) as fh:
            pids.append(int(fh.read()))
    for _ in range(50):
        if all(dead(p) for p in pids):
            break
        time.sleep(0.1)
    check(all(dead(p) for p in pids), "helper processes alive after the deadline: %r" % pids)
    check(not mounted_at(e.k.poddir("pod-a", "vol")), "mounted")
    check("timed out after 2 s; process group killed" in e.read_log(), e.read_log()[-1500:])
    # the deadline also holds for a parallel second pod
    e.fake_helper("deny")
    e.k.mount("pod-b", "vol", e.opts(), expect="Failure")


def ppid(pid):
    with open("/proc/%d/stat" % pid) as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def fds_of(pid):
    """{fd: target} of a live process, pipes as "pipe"."""
    d = "/proc/%d/fd" % pid
    out = {}
    for n in os.listdir(d):
        try:
            t = os.readlink(os.path.join(d, n))
        except OSError:
            continue
        out[int(n)] = "pipe" if t.startswith("pipe:") else t
    return out


def read_until_eof(f, limit):
    """kubelet's read of the combined output: until EOF.  False when none came within
    @limit seconds (a bound so a broken driver fails the case instead of hanging it)."""
    deadline = time.monotonic() + limit
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([f], [], [], left)[0]:
            return False
        if not os.read(f.fileno(), 65536):
            return True


@case
def nfs_killed_driver_holds_nothing_of_kubelets(e):
    """kubelet reads a call's output until EOF.  The driver is SIGKILLed while its forked
    mount child waits on a mount.nfs that never returns (a dead server): no process left
    behind may hold kubelet's reply pipe (kubelet would wait for EOF for ever) or the pod
    dir's lock (the next call would wait for it).  While it runs, the forked child holds
    only stdin /dev/null and its capture pipe, and mount.nfs gets PATH and LC_ALL=C only."""
    e.fake_helper("hang")
    pd = e.k.poddir("pod-a", "vol")
    os.makedirs(pd)
    env = dict(e.env, FLEXVOL_MOUNT_TIMEOUT="600", KUBELET_ONLY="must-not-reach-helpers")
    p = subprocess.Popen([e.bin, "mount", pd, e.opts()], stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd="/")
    helper_file = os.path.join(e.fake_dir, "helper")
    deadline = time.monotonic() + 30
    while not os.path.exists(helper_file) and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    check(os.path.exists(helper_file), "mount.nfs never started")
    time.sleep(0.05)  # the fake writes its pid before it execs sleep
    with open(helper_file) as f:
        helper = int(f.read())
    with open(os.path.join(e.fake_dir, "grandchild")) as f:
        grandchild = int(f.read())
    child = 0
    try:
        child = ppid(helper)
        check(ppid(child) == p.pid, "mount.nfs runs under the driver's forked child")
        fds = fds_of(child)
        check(fds == {0: "/dev/null", 1: "pipe", 2: "pipe"},
              "the forked child holds only /dev/null and its pipe: %r" % fds)
        with open(os.path.join(e.fake_dir, "environ"), "rb") as f:  # as mount.nfs was started
            envs = sorted(f.read().decode().split("\0")[:-1])
        check(envs == ["LC_ALL=C", "PATH=/usr/sbin:/usr/bin:/sbin:/bin"],
              "mount.nfs' environment: %r" % envs)
        p.kill()
        check(read_until_eof(p.stdout, 20), "no EOF on the reply pipe after the driver died: "
              "a process left behind holds it")
        check(read_until_eof(p.stderr, 5), "no EOF on stderr")
        p.wait()
        # the next call on that pod dir finds no lock held by anything left behind
        e.drv.call("unmount", pd, env=dict(e.env, FLEXVOL_LOCK_TIMEOUT="2"), expect="Success")
        check(dead(child), "the forked child outlived the killed driver")
    finally:
        p.kill()
        for pid in (child, helper, grandchild):  # whatever is left: ours to end, by pid
            try:
                if pid > 0:
                    os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        p.wait()
        p.stdout.close()
        p.stderr.close()


@case
def nfs_real_helper_without_kernel_nfs(e):
    """The real /sbin/mount.nfs on this NFS-less kernel: its own reason, quickly."""
    check(os.access("/sbin/mount.nfs", os.X_OK), "/sbin/mount.nfs missing (apt-get install nfs-common)")
    r = e.k.mount("pod-a", "vol", e.opts(nfsVersion="4.2"), expect="Failure")
    check("mount.nfs" in r["message"] and ("No such device" in r["message"] or "not supported" in r["message"]),
          r["message"])
    check(r.elapsed < 10, "took %.1f s" % r.elapsed)
    check(not mounts_under(e.dir), "mounted")


def tmpfs(where, source="127.0.0.1:/exports/vol"):
    os.makedirs(where, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", source, where], check=True)


@case
def nfs_unmount_not_mounted_is_success(e):
    e.k.unmount("pod-x", "vol", expect="Success")  # the dir does not exist
    os.makedirs(e.k.poddir("pod-y", "vol"))
    e.k.unmount("pod-y", "vol", expect="Success")
    e.k.unmount("pod-y", "vol", expect="Success")
    d = e.k.poddir("pod-z", "vol")
    os.makedirs(d)
    open(os.path.join(d, "stray"), "w").close()
    r = e.k.unmount("pod-z", "vol", expect="Failure")
    check("not empty" in r["message"], r["message"])


@case
def nfs_unmount_stacked_and_twice(e):
    d = e.k.poddir("pod-a", "vol")
    tmpfs(d)
    tmpfs(d)
    with open(os.path.join(d, "f"), "w") as f:
        f.write("x")
    e.k.unmount("pod-a", "vol", expect="Success")
    check(not mounted_at(d) and os.listdir(d) == [], "unmounted and empty")
    e.k.unmount("pod-a", "vol", expect="Success")


@case
def nfs_unmount_busy_goes_forced_then_lazy(e):
    """A busy mount (a process has its cwd in it): normal unmount says EBUSY, forced too,
    the lazy detach takes it off the tree; the dir is empty."""
    d = e.k.poddir("pod-a", "vol")
    tmpfs(d)
    p = subprocess.Popen(["sleep", "60"], cwd=d)
    try:
        e.k.unmount("pod-a", "vol", expect="Success")
        check(not mounted_at(d) and os.listdir(d) == [], "unmounted and empty")
        log = e.read_log()
        check("busy; forcing" in log and "detaching lazily" in log, log[-1500:])
    finally:
        p.kill()
        p.wait()


@case
def nfs_mount_conflicts_with_another_source(e):
    d = e.k.poddir("pod-a", "vol")
    tmpfs(d, "10.0.0.9:/other")
    r = e.k.mount("pod-a", "vol", e.opts(), expect="Failure")
    check("already mounted from '10.0.0.9:/other'" in r["message"], r["message"])
    check(len(mounted_at(d)) == 1, "left alone")
    # same source string but not NFS: still not ours
    e.k.unmount("pod-a", "vol", expect="Success")
    tmpfs(d, "127.0.0.1:/exports/vol")
    r = e.k.mount("pod-a", "vol", e.opts(), expect="Failure")
    check("already mounted" in r["message"] and "tmpfs" in r["message"], r["message"])
    e.k.unmount("pod-a", "vol", expect="Success")


@case
def nfs_parallel_calls_stay_separate(e):
    """8 pods at once (the dispatcher locks per pod dir): each call answers for itself."""
    e.fake_helper("deny")

    def run(uid):
        r = e.k.mount(uid, "vol", e.opts(), expect="Failure")
        check("access denied" in r["message"], r["message"])
        e.k.unmount(uid, "vol", expect="Success")

    _, errors = in_parallel([lambda i=i: run("pod-%d" % i) for i in range(8)])
    check(not errors, errors)
    check(len(e.helper_calls()) == 8, e.helper_calls())


# --- directory arguments taken literally (issue 9 item 4) ---------------------------

def tmpfs_with_file(path):
    os.makedirs(path, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "foreign", path], check=True)
    with open(os.path.join(path, "precious"), "w") as f:
        f.write("x")


def intact(path):
    m = mounted_at(path)
    check(len(m) == 1 and m[0][2] == "tmpfs", "the foreign mount at %s is gone: %r" % (path, m))
    check(os.path.exists(os.path.join(path, "precious")), "its file is gone")


@case
def nfs_dir_taken_literally(e):
    """mount into a missing dir, a symlinked dir, /proc/self/root/... or /proc/self/cwd/...: Failure
    before mount.nfs runs, nothing created.  unmount of a symlinked dir (or one under a symlinked
    parent) is refused and the foreign mount behind it survives; unmount of a missing dir is Success."""
    e.fake_helper("record")
    o = e.opts()
    missing = os.path.join(e.dir, "nonexistent", "x")
    r = e.drv.call("mount", missing, o, expect="Failure")
    check("does not exist" in r["message"], r["message"])
    check(not os.path.exists(os.path.join(e.dir, "nonexistent")), "mount created the directory")
    e.drv.call("unmount", missing, expect="Success")

    foreign = os.path.join(e.dir, "foreign")
    tmpfs_with_file(foreign)
    pd = e.k.poddir("pod-a", "vol")
    os.makedirs(os.path.dirname(pd))
    os.symlink(foreign, pd)
    for op, args in (("mount", (pd, o)), ("unmount", (pd,))):
        r = e.drv.call(op, *args, expect="Failure")
        check("symlink or magic link" in r["message"], "%s: %s" % (op, r["message"]))
        intact(foreign)
    os.unlink(pd)
    os.makedirs(pd)
    for p in ("/proc/self/root" + pd, "/proc/self/cwd" + pd):
        for op, args in (("mount", (p, o)), ("unmount", (p,))):
            r = e.drv.call(op, *args, expect="Failure")
            check("symlink or magic link" in r["message"], "%s %s: %s" % (op, p, r["message"]))
    # a symlinked parent: the pod's volumes dir points at a directory holding a mount
    real = os.path.join(e.dir, "elsewhere")
    tmpfs_with_file(os.path.join(real, "vol"))
    pd2 = e.k.poddir("pod-b", "vol")
    os.makedirs(os.path.dirname(os.path.dirname(pd2)))
    os.symlink(real, os.path.dirname(pd2))
    r = e.drv.call("unmount", pd2, expect="Failure")
    check("symlink or magic link" in r["message"], r["message"])
    intact(os.path.join(real, "vol"))
    check(e.helper_calls() == [], "mount.nfs ran: %r" % e.helper_calls())
    subprocess.run(["umount", os.path.join(real, "vol")], check=True)
    subprocess.run(["umount", foreign], check=True)
