"""Host-lane cases of the loop driver in node mode (attach_mode = node), run by tests/sim/run.py.

kubelet then calls only mount <poddir> <json> and unmount <poddir> (contract §4.3; mount for
different pods of one volume in parallel): the first pod's mount binds the image, formats a blank
one and mounts the device once per node, every pod binds that; the last pod's unmount releases
everything.  Real loop devices, real mkfs and mounts, in the runner's private mount namespace.
"""
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flexsim import Driver, Fail, case_registry, check, dead, in_parallel, loop_ro, mounted_at, mounts_under  # noqa: E402
import test_loop  # noqa: E402

DRIVER = "loop"
CASES, case = case_registry()


class Env(test_loop.Env):
    def __init__(self, build, name):
        super().__init__(build, name)
        self.env["FLEXVOL_ATTACH_MODE"] = "node"
        self.drv = Driver(self.bin, self.env)
        self.k.drv = self.drv

    def pods(self, uids, vol="pv1"):
        return [self.k.poddir(u, vol) for u in uids]


def make_env(build, name):
    return Env(build, name)


def up(e, uids, vol="pv1", opts=None, parallel=False):
    o = opts or e.opts(vol)
    calls = [lambda u=u: e.k.mount(u, vol, o, expect="Success") for u in uids]
    if parallel:
        _, errors = in_parallel(calls)
        check(not errors, "parallel mounts: %r" % errors)
    else:
        for c in calls:
            c()


def down(e, uids, vol="pv1", parallel=False):
    calls = [lambda u=u: e.k.unmount(u, vol, expect="Success") for u in uids]
    if parallel:
        _, errors = in_parallel(calls)
        check(not errors, "parallel unmounts: %r" % errors)
    else:
        for c in calls:
            c()


def one_binding(e, what):
    check(len(e.loops()) == 1, "%s: one binding expected: %r" % (what, e.loops()))
    return list(e.loops())[0]


@case
def node_init_capabilities(e):
    """attach:false in node mode (others unchanged); controller mode without any config at all."""
    r = e.drv.call("init", expect="Success")
    check(r["capabilities"] == {"attach": False, "selinuxRelabel": True, "supportsMetrics": True,
                                "fsGroup": True, "requiresFSResize": True}, r["capabilities"])
    r = e.drv.call("init", env={"LC_ALL": "C"}, expect="Success")  # ({} would mean "the default env")
    check(r["capabilities"]["attach"] is True, "no config, no environment: controller mode")
    conf = os.path.join(e.dir, "flexvol.conf")
    with open(conf, "w") as f:
        f.write("attach_mode = node\n")
    r = e.drv.call("init", env={"FLEXVOL_CONFIG": conf}, expect="Success")
    check(r["capabilities"]["attach"] is False, "attach_mode = node from the config file")
    r = e.drv.call("init", env={"FLEXVOL_CONFIG": os.path.join(e.dir, "missing.conf")},
                   expect="Success")
    check(r["capabilities"]["attach"] is True, "unreadable config: controller mode")
    with open(conf, "w") as f:
        f.write("attach_mode = nodes\n")
    r = e.drv.call("mount", e.k.poddir("p", "pv1"), e.opts(), env={"FLEXVOL_CONFIG": conf},
                   expect="Failure")
    check("attach_mode" in r["message"], r["message"])
    r = e.drv.call("init", env={"FLEXVOL_ATTACH_MODE": "controller"}, expect="Success")
    check(r["capabilities"]["attach"] is True, "FLEXVOL_ATTACH_MODE=controller")


@case
def node_lifecycle_and_data_kept(e):
    """mount twice, unmount twice; nothing left after the last pod; data kept for the next mount."""
    k = e.k
    o = e.opts()
    k.mount("pod-a", "pv1", o, expect="Success")
    k.mount("pod-a", "pv1", o, expect="Success")
    dev = one_binding(e, "after mount")
    m = mounted_at(e.devmount())
    check(len(m) == 1 and m[0][1] == dev and m[0][2] == "ext4", "device mount: %r" % m)
    pd = k.poddir("pod-a", "pv1")
    check(len(mounted_at(pd)) == 1, "one mount in the pod dir: %r" % mounted_at(pd))
    with open(os.path.join(pd, "keep.txt"), "w") as f:
        f.write("kept")
    k.unmount("pod-a", "pv1", expect="Success")
    k.unmount("pod-a", "pv1", expect="Success")
    check(os.path.isdir(pd) and not os.listdir(pd), "pod dir left empty")
    e.nothing_left("after the last pod")
    check(not os.path.exists(os.path.join(e.state, "loop")) or
          not os.listdir(os.path.join(e.state, "loop")), "state record left")
    k.mount("pod-b", "pv1", o, expect="Success")
    with open(os.path.join(k.poddir("pod-b", "pv1"), "keep.txt")) as f:
        check(f.read() == "kept", "data kept across unmount of all pods")
    k.unmount("pod-b", "pv1", expect="Success")
    # undo of something never there
    k.unmount("pod-x", "ghost", expect="Success")
    os.makedirs(k.poddir("pod-y", "ghost"))
    k.unmount("pod-y", "ghost", expect="Success")
    e.nothing_left("lifecycle")


@case
def node_pods_in_parallel(e):
    """§4.3: mount and unmount for different pods of one volume run in parallel."""
    k = e.k
    a = ["pod-%d" % i for i in range(6)]
    up(e, a, parallel=True)
    dev = one_binding(e, "parallel mounts")
    check(len(mounted_at(e.devmount())) == 1, "one device mount per node")
    for pd in e.pods(a):
        m = mounted_at(pd)
        check(len(m) == 1 and m[0][1] == dev, "%s: %r" % (pd, m))
    with open(os.path.join(k.poddir(a[0], "pv1"), "shared"), "w") as f:
        f.write("one")
    with open(os.path.join(k.poddir(a[5], "pv1"), "shared")) as f:
        check(f.read() == "one", "all pods see one filesystem")
    # half go while others come, all at once
    b = ["pod-n%d" % i for i in range(4)]
    o = e.opts()
    calls = [lambda u=u: k.unmount(u, "pv1", expect="Success") for u in a[:4]]
    calls += [lambda u=u: k.mount(u, "pv1", o, expect="Success") for u in b]
    _, errors = in_parallel(calls)
    check(not errors, "mixed: %r" % errors)
    check(one_binding(e, "mixed") == dev, "the same device stays")
    for pd in e.pods(a[4:] + b):
        check(len(mounted_at(pd)) == 1, "%s mounted" % pd)
    for pd in e.pods(a[:4]):
        check(not mounted_at(pd) and not os.listdir(pd), "%s empty" % pd)
    down(e, a[4:] + b, parallel=True)
    e.nothing_left("parallel")


@case
def node_read_only(e):
    """ro: the device mount and the binds read-only; a read-write pod next to read-only ones
    gets a writable bind (issue 17 point 8), the read-only pods stay read-only."""
    k = e.k
    up(e, ["pod-w"])
    with open(os.path.join(k.poddir("pod-w", "pv1"), "f"), "w") as f:
        f.write("rw data")
    # a ro pod next to a rw one: its bind is ro, the device stays rw
    k.mount("pod-r0", "pv1", e.opts(ro=True), expect="Success")
    check("ro" in mounted_at(k.poddir("pod-r0", "pv1"))[0][3].split(","), "ro bind")
    down(e, ["pod-w", "pod-r0"])
    e.nothing_left("rw")
    o = e.opts(ro=True)
    up(e, ["pod-r"], opts=o)
    dev = one_binding(e, "ro")
    check(not loop_ro(dev), "the loop device is read-write: another pod may want to write")
    check("ro" in mounted_at(e.devmount())[0][3].split(","), "device mount ro")
    pd = k.poddir("pod-r", "pv1")
    with open(os.path.join(pd, "f")) as f:
        check(f.read() == "rw data", "data readable")
    try:
        open(os.path.join(pd, "new"), "w").close()
        raise Fail("write on a read-only volume succeeded")
    except OSError as err:
        check(err.errno == 30, "EROFS expected, got %r" % err)
    k.mount("pod-w2", "pv1", e.opts(), expect="Success")
    with open(os.path.join(k.poddir("pod-w2", "pv1"), "new"), "w") as f:
        f.write("rw pod next to a ro one")
    try:
        open(os.path.join(pd, "new2"), "w").close()
        raise Fail("the read-only pod became writable")
    except OSError as err:
        check(err.errno == 30, "EROFS expected, got %r" % err)
    down(e, ["pod-w2", "pod-r"])
    e.nothing_left("ro")


@case
def node_refusals_leave_nothing(e):
    """Same validation and mkfs refusals as controller mode; a refused mount leaves nothing."""
    k = e.k
    for o, words in ((e.opts(file="../x.img"), "inside the loop root"),
                     (e.opts(size="12"), "size"),
                     (e.opts(fstype="ext4;reboot"), "fsType")):
        r = k.mount("pod-a", "pv1", o, expect="Failure")
        check(words in r["message"], r["message"])
    check(not os.listdir(e.root), "nothing created in the loop root")
    with open(e.image(), "wb") as f:
        f.truncate(320 << 20)
    subprocess.run(["mkfs.xfs", "-q", e.image()], check=True)
    r = k.mount("pod-a", "pv1", e.opts(size=None, fstype="ext4"), expect="Failure")
    check("xfs" in r["message"] and "refusing" in r["message"], r["message"])
    e.nothing_left("fsType refused")
    blank = e.image("blank.img")
    open(blank, "wb").truncate(64 << 20)
    r = k.mount("pod-a", "pv1", e.opts(file="blank.img", size=None, ro=True), expect="Failure")
    check("blank" in r["message"], r["message"])
    e.nothing_left("ro blank refused")
    up(e, ["pod-a"], opts=e.opts(size=None, fstype="xfs"))
    check(mounted_at(e.devmount())[0][2] == "xfs", "existing xfs mounted, not reformatted")
    down(e, ["pod-a"])
    e.nothing_left("refusals")


@case
def node_identity_from_the_pod_dir(e):
    """Options naming another PV (pvOrVolumeName) or another PV's image never reach its device."""
    k = e.k
    up(e, ["pod-a"], vol="pv1", opts=e.opts("pv1"))
    dev = one_binding(e, "pv1")
    # pv2's options claim to be pv1, and name pv1's image: refused, pv1 untouched
    o = k.options("pv2", {"file": "vol1.img", "size": "64Mi", "kubernetes.io/pvOrVolumeName": "pv1"},
                  fstype="ext4")
    r = k.mount("pod-b", "pv2", o, expect="Failure")
    check("another volume" in r["message"], r["message"])
    check(not mounted_at(k.poddir("pod-b", "pv2")), "pv2's pod got nothing")
    # pv2 with its own image but pretending to be pv1: works, as pv2
    o2 = k.options("pv2", {"file": "vol2.img", "size": "64Mi", "kubernetes.io/pvOrVolumeName": "pv1"},
                   fstype="ext4")
    up(e, ["pod-b"], vol="pv2", opts=o2)
    check(len(e.loops()) == 2, "two bindings: %r" % e.loops())
    # pv1's pod dir with options naming pv2's image: refused (the image is pv2's)
    r = k.mount("pod-c", "pv1", e.opts("pv1", file="vol2.img"), expect="Failure")
    check("another volume" in r["message"], r["message"])
    down(e, ["pod-b"], vol="pv2")
    check(list(e.loops()) == [dev], "pv2's teardown left pv1's binding: %r" % e.loops())
    check(len(mounted_at(k.poddir("pod-a", "pv1"))) == 1, "pv1 still mounted")
    down(e, ["pod-a"], vol="pv1")
    e.nothing_left("identity")


@case
def node_state_wiped(e):
    """Teardown with the state dir wiped: the pod dir's mount tells the device."""
    up(e, ["pod-a", "pod-b"])
    shutil.rmtree(e.state, ignore_errors=True)
    down(e, ["pod-a"])
    check(len(e.loops()) == 1, "pod-b still holds it")
    shutil.rmtree(e.state, ignore_errors=True)
    down(e, ["pod-b"])
    e.nothing_left("state wiped")


def kill_at(e, args, delay_ms):
    p = e.drv.spawn(*args)
    time.sleep(delay_ms / 1000)
    p.send_signal(signal.SIGKILL)
    p.communicate()


@case
def node_sigkill_then_retry(e):
    """SIGKILL of mount and of unmount at many points; the retry ends in the right state."""
    k = e.k
    o = e.opts()
    pd = k.poddir("pod-a", "pv1")
    os.makedirs(pd, exist_ok=True)
    # the first mount formats: kill it anywhere, including during mkfs
    for delay_ms in (0, 2, 5, 10, 20, 40, 80, 150):
        kill_at(e, ("mount", pd, o), delay_ms)
        k.mount("pod-a", "pv1", o, expect="Success")
        dev = one_binding(e, "mount killed at %d ms" % delay_ms)
        check(len(mounted_at(pd)) == 1 and len(mounted_at(e.devmount())) == 1,
              "after mount killed at %d ms: %r" % (delay_ms, mounts_under(e.dir)))
        kill_at(e, ("unmount", pd), delay_ms)
        k.unmount("pod-a", "pv1", expect="Success")
        e.nothing_left("unmount killed at %d ms" % delay_ms)
        del dev
    # with a second pod in place, a killed unmount of the first never takes the device
    up(e, ["pod-b"])
    for delay_ms in (0, 3, 10, 30):
        k.mount("pod-a", "pv1", o, expect="Success")
        kill_at(e, ("unmount", pd), delay_ms)
        k.unmount("pod-a", "pv1", expect="Success")
        check(len(mounted_at(k.poddir("pod-b", "pv1"))) == 1 and len(e.loops()) == 1,
              "pod-b intact after a killed unmount of pod-a at %d ms" % delay_ms)
    down(e, ["pod-b"])
    e.nothing_left("sigkill")


@case
def node_lock_is_per_volume(e):
    """Two volumes mount in parallel (their locks differ); one volume's pods take turns."""
    k = e.k
    o1, o2 = e.opts("pv1"), e.opts("pv2", file="vol2.img")
    _, errors = in_parallel([lambda: k.mount("pod-a", "pv1", o1, expect="Success"),
                             lambda: k.mount("pod-b", "pv2", o2, expect="Success")])
    check(not errors, errors)
    check(len(e.loops()) == 2, "two bindings: %r" % e.loops())
    _, errors = in_parallel([lambda: k.unmount("pod-a", "pv1", expect="Success"),
                             lambda: k.unmount("pod-b", "pv2", expect="Success")])
    check(not errors, errors)
    e.nothing_left("two volumes")


@case
def node_sigkill_during_mkfs(e):
    """The first pod's mount killed while mkfs runs (a gate in front of the real mkfs), then the
    retry: one binding, one device mount, one pod mount, a valid filesystem."""
    k = e.k
    wrap = os.path.join(e.dir, "helpers")
    os.makedirs(wrap)
    fifo = os.path.join(e.dir, "gate")
    started = os.path.join(e.dir, "mkfs-started")
    done = os.path.join(e.dir, "mkfs-done")
    os.mkfifo(fifo)
    with open(os.path.join(wrap, "mkfs.ext4"), "w") as f:
        f.write("#!/bin/sh\necho $$ > %s\nread x < %s\n/sbin/mkfs.ext4 \"$@\"\nrc=$?\n: > %s\nexit $rc\n"
                % (started, fifo, done))
    os.chmod(os.path.join(wrap, "mkfs.ext4"), 0o755)
    o = e.opts()
    pd = k.poddir("pod-a", "pv1")
    os.makedirs(pd)
    env = dict(e.env, FLEXVOL_HELPER_PATH=wrap + ":/usr/sbin:/usr/bin:/sbin:/bin")
    p = subprocess.Popen([e.bin, "mount", pd, o], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not os.path.exists(started) and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.01)
    check(os.path.exists(started), "the mkfs wrapper never started")
    p.send_signal(signal.SIGKILL)
    p.communicate()

    def wrapper_pid():
        with open(started) as f:
            return int(f.read().strip() or 0)

    try:
        g = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.write(g, b"go\n")
        os.close(g)
    except OSError:
        pass
    else:
        deadline = time.monotonic() + 60
        # the gate may open just as the wrapper dies with its driver: then no mkfs runs at all
        while not os.path.exists(done) and time.monotonic() < deadline and not dead(wrapper_pid()):
            time.sleep(0.01)
    k.mount("pod-a", "pv1", o, expect="Success")
    k.mount("pod-a", "pv1", o, expect="Success")
    dev = one_binding(e, "after the retry")
    m = mounted_at(e.devmount())
    check(len(m) == 1 and m[0][1] == dev and m[0][2] == "ext4", "one ext4 device mount: %r" % m)
    check(len(mounted_at(pd)) == 1, "one pod mount")
    down(e, ["pod-a"])
    e.nothing_left("kill during mkfs")


@case
def node_inline_names_collide_not(e):
    """Issue 17 point 7: two pods' inline volumes both named `data`, on different images, are two
    volumes (node mode keys on the backend object, not on the pod-chosen name alone)."""
    k = e.k
    k.mount("pod-a", "data", e.opts("data", file="a.img"), expect="Success")
    k.mount("pod-b", "data", e.opts("data", file="b.img"), expect="Success")
    check(len(e.loops()) == 2, "two bindings: %r" % e.loops())
    ma, mb = mounted_at(k.poddir("pod-a", "data")), mounted_at(k.poddir("pod-b", "data"))
    check(len(ma) == 1 and len(mb) == 1 and ma[0][1] != mb[0][1], "two devices: %r %r" % (ma, mb))
    k.unmount("pod-a", "data", expect="Success")
    check(len(e.loops()) == 1 and len(mounted_at(k.poddir("pod-b", "data"))) == 1,
          "pod-b's volume intact after pod-a's went: %r" % e.loops())
    k.unmount("pod-b", "data", expect="Success")
    e.nothing_left("inline names")


@case
def node_inline_named_like_a_pv(e):
    """An inline volume named like a PV, on its own image, is another volume: it mounts, and
    its teardown never reaches the PV's device."""
    k = e.k
    up(e, ["pod-a"], vol="pv1", opts=e.opts("pv1"))
    dev = one_binding(e, "pv1")
    k.mount("pod-b", "pv1", e.opts("pv1", file="inline.img"), expect="Success")
    mb = mounted_at(k.poddir("pod-b", "pv1"))
    check(len(mb) == 1 and mb[0][1] != dev, "the inline volume got its own device: %r" % mb)
    k.unmount("pod-b", "pv1", expect="Success")
    check(list(e.loops()) == [dev] and len(mounted_at(k.poddir("pod-a", "pv1"))) == 1,
          "the PV is intact: %r" % e.loops())
    down(e, ["pod-a"], vol="pv1")
    e.nothing_left("inline named like a PV")


@case
def node_unmount_retry_after_pod_umount(e):
    """The pod mount went, the teardown did not (killed): the retry still finds the volume."""
    k = e.k
    up(e, ["pod-a"])
    subprocess.run(["umount", k.poddir("pod-a", "pv1")], check=True)
    k.unmount("pod-a", "pv1", expect="Success")
    e.nothing_left("unmount retry")
