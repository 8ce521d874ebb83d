"""Host-lane cases of the garbage collector (op `gc`, and its opportunistic pass), loop driver.

Issue 17 point 2: attachments kubelet never comes back for.  (a) unmountdevice killed after its
umount, (b) controller mode: waitforattach succeeded, mountdevice keeps failing, the pod is deleted
(detach runs in the controller-manager and releases nothing on the node), (c) node mode: a mount
killed between the device mount and the bind, then the pod deleted (kubelet never calls unmount).
The collector releases those - after the grace period, with the volume lock free, when the kernel
says nothing uses them - and never anything in use.  Real loop devices, mounts and mkfs.
"""
import fcntl
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flexsim import case_registry, check, mounted_at, mounts_under  # noqa: E402
import test_loop  # noqa: E402
import test_loop_node  # noqa: E402
from test_loop import as_older_version, bring_up  # noqa: E402

DRIVER = "loop"
CASES, case = case_registry()


class Env(test_loop.Env):
    pass


class NodeEnv(test_loop_node.Env):
    pass


def make_env(build, name):
    return NodeEnv(build, name) if name.startswith("gc_node") else Env(build, name)


def gc(e, grace=None, expect="Success"):
    env = dict(e.env)
    if grace is not None:
        env["FLEXVOL_GC_GRACE"] = str(grace)
    return e.drv.call("gc", env=env, expect=expect)


def umount(path):
    subprocess.run(["umount", path], check=True)


def records(e):
    d = os.path.join(e.state, "loop")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


@case
def gc_is_an_op_of_block_drivers_only(e):
    """gc is our own op: Success on a clean node, its argument count checked; init unchanged."""
    gc(e)
    r = e.drv.call("gc", "extra", expect="Failure")
    check("argument" in r["message"], r["message"])
    r = e.drv.call("init", expect="Success")
    check(set(r["capabilities"]) == {"attach", "selinuxRelabel", "supportsMetrics", "fsGroup",
                                     "requiresFSResize"}, r["capabilities"])
    nfs = os.path.join(os.path.dirname(e.bin), "nfs")
    if os.path.exists(nfs):
        from flexsim import Driver
        Driver(nfs, e.env).call("gc", expect="Not supported")
    e.nothing_left("gc on a clean node")


@case
def gc_a_unmountdevice_killed_after_umount(e):
    """(a): the device mount went, the release never ran, kubelet sees no mount and never calls
    again.  gc releases the binding - once the record is older than the grace.  Since issue 29
    the kernel releases a binding of this version with that umount (autoclear, set at bind):
    the leak is an older version's binding's."""
    k = e.k
    dev = bring_up(e)
    k.unmount("pod-a", "pv1", expect="Success")
    as_older_version(dev)
    umount(k.gmp("pv1"))  # unmountdevice killed right after its umount
    gc(e)  # default grace: the record is seconds old
    check(list(e.loops()) == [dev], "a young record is left alone: %r" % e.loops())
    gc(e, grace=0)
    e.nothing_left("gc after a killed unmountdevice")
    check(not records(e), "records left: %r" % records(e))
    gc(e, grace=0)  # idempotent


@case
def gc_b_mountdevice_failing_then_pod_deleted(e):
    """(b): waitforattach bound the image, mountdevice keeps failing (xfs image, ext4 asked), the
    pod is deleted; detach runs in the controller-manager.  Since issue 29 the failing
    mountdevice leaves no binding (its claim binds the image again, released by the kernel with
    the call's end); gc removes the records after the grace.  A waitforattach that nobody
    followed up is released by gc."""
    k = e.k
    with open(e.image(), "wb") as f:
        f.truncate(320 << 20)
    subprocess.run(["mkfs.xfs", "-q", e.image()], check=True)
    o = e.opts(size=None, fstype="ext4")
    for _ in range(2):
        dev = k.waitforattach("loop:vol1.img", o, expect="Success")["device"]
        k.mountdevice("pv1", dev, o, expect="Failure")
    k.detach("pv1", node="controller-manager-elsewhere", expect="Success")
    check(not e.loops(), "the failed claim's binding went with its call: %r" % e.loops())
    check(records(e), "its record is left for gc")
    gc(e)
    check(records(e), "left alone within the grace")
    gc(e, grace=0)
    e.nothing_left("gc after failing mountdevice")
    check(not records(e), "records left: %r" % records(e))
    # only waitforattach, then the pod went: the hinted binding goes too
    k.waitforattach("loop:vol2.img", e.opts("pv2", file="vol2.img"), expect="Success")
    check(len(e.loops()) == 1, "bound: %r" % e.loops())
    gc(e)
    check(len(e.loops()) == 1, "a fresh waitforattach is left alone: %r" % e.loops())
    gc(e, grace=0)
    e.nothing_left("gc after a lone waitforattach")


@case
def gc_never_releases_what_is_in_use(e):
    """Mounted volumes, and a leaked binding whose volume lock is held, are never released."""
    k = e.k
    d1 = bring_up(e, "pv1", uids=("pod-a", "pod-b"))
    d2 = bring_up(e, "pv2", e.opts("pv2", file="vol2.img"))
    k.unmount("pod-a", "pv2", expect="Success")
    as_older_version(d2)  # else the kernel releases it with the umount (issue 29)
    umount(k.gmp("pv2"))  # pv2 leaked, pv1 in use
    lockdir = os.path.join(e.run, "locks")
    # a free lock has no file (its last holder removes it): make it, as fv_lock() does
    with open(os.path.join(lockdir, "loop-vol-pv2.lock"), "a+") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        gc(e, grace=0)
        check(sorted(e.loops()) == sorted([d1, d2]), "nothing released under a held lock: %r"
              % e.loops())
    check(len(mounted_at(k.gmp("pv1"))) == 1, "pv1's device mount stays")
    for uid in ("pod-a", "pod-b"):
        check(len(mounted_at(k.poddir(uid, "pv1"))) == 1, "pv1's pod %s stays" % uid)
    gc(e, grace=0)
    check(list(e.loops()) == [d1], "pv2 released once its lock is free, pv1 kept: %r" % e.loops())
    # a mount of pv1's device nobody told us about (an operator's, another namespace's view)
    k.unmount("pod-a", "pv1", expect="Success")
    k.unmount("pod-b", "pv1", expect="Success")
    other = os.path.join(e.dir, "elsewhere")
    os.makedirs(other)
    subprocess.run(["mount", "--bind", k.gmp("pv1"), other], check=True)
    umount(k.gmp("pv1"))
    gc(e, grace=0)
    check(list(e.loops()) == [d1], "a device mounted elsewhere is kept: %r" % e.loops())
    umount(other)
    gc(e, grace=0)
    e.nothing_left("in use")


@case
def gc_runs_opportunistically(e):
    """Node-side ops run a bounded pass now and then (at most one per gc_interval): a leak goes
    without anybody calling gc."""
    k = e.k
    env = dict(e.env, FLEXVOL_GC_GRACE="0", FLEXVOL_GC_INTERVAL="2")
    as_older_version(bring_up(e))  # else the kernel releases it with the umount (issue 29)
    k.unmount("pod-a", "pv1", expect="Success")
    umount(k.gmp("pv1"))
    os.makedirs(k.poddir("pod-z", "other"), exist_ok=True)
    # within the interval (60 s here: with 2 s a loaded machine could pass it between the calls)
    e.drv.call("unmount", k.poddir("pod-z", "other"), env=dict(env, FLEXVOL_GC_INTERVAL="60"),
               expect="Success")
    check(len(e.loops()) == 1, "the ops just before ran a pass: none within the interval")
    time.sleep(2.1)
    e.drv.call("unmount", k.poddir("pod-z", "other"), env=env, expect="Success")
    e.nothing_left("opportunistic gc")


@case
def gc_node_c_mount_killed_before_the_bind(e):
    """(c) node mode: the device mount is made, the bind never is, the pod is deleted (kubelet
    never calls unmount).  gc takes the device mount and the binding."""
    k = e.k
    k.mount("pod-a", "pv1", e.opts(), expect="Success")
    pd = k.poddir("pod-a", "pv1")
    umount(pd)  # as if killed between the device mount and the bind
    os.rmdir(pd)  # the pod is deleted
    check(len(e.loops()) == 1 and mounts_under(e.run), "leaked: %r" % mounts_under(e.dir))
    gc(e)
    check(len(e.loops()) == 1, "a young device mount is left alone")
    gc(e, grace=0)
    e.nothing_left("gc in node mode")
    check(not records(e), "records left: %r" % records(e))


@case
def gc_node_c_mount_killed_at_any_point(e):
    """(c) with real SIGKILLs: whatever a killed first mount left, a deleted pod's leftovers go."""
    k = e.k
    o = e.opts()
    for delay_ms in (0, 5, 20, 60, 150, 300):
        pd = k.poddir("pod-%d" % delay_ms, "pv1")
        os.makedirs(pd)
        test_loop_node.kill_at(e, ("mount", pd, o), delay_ms)
        if mounted_at(pd):
            umount(pd)  # kubelet got no answer; the pod goes, its dir with it
        os.rmdir(pd)
        gc(e, grace=0)
        e.nothing_left("mount killed at %d ms, pod deleted, gc" % delay_ms)


@case
def gc_node_never_releases_what_is_in_use(e):
    """Node mode: pods using a volume keep it; a device mount whose lock is held stays."""
    k = e.k
    k.mount("pod-a", "pv1", e.opts(), expect="Success")
    k.mount("pod-b", "pv1", e.opts(), expect="Success")
    gc(e, grace=0)
    check(len(e.loops()) == 1, "binding kept")
    for uid in ("pod-a", "pod-b"):
        check(len(mounted_at(k.poddir(uid, "pv1"))) == 1, "pod %s kept" % uid)
    k.unmount("pod-a", "pv1", expect="Success")
    gc(e, grace=0)
    check(len(mounted_at(k.poddir("pod-b", "pv1"))) == 1, "pod-b kept")
    k.unmount("pod-b", "pv1", expect="Success")
    e.nothing_left("node in use")


@case
def gc_node_never_walks_into_a_filesystem(e):
    """A device mount of an older version is <run>/loop/mounts/<name> itself: gc and unmount treat
    it as one volume and never walk into it (its empty directories are a tenant's data); a
    filesystem not on a device of ours is never unmounted."""
    k = e.k
    d = os.path.join(e.run, "loop", "mounts", "old")
    os.makedirs(d)
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", d], check=True)
    os.makedirs(os.path.join(d, "empty-dir"))
    gc(e, grace=0)
    os.makedirs(k.poddir("pod-a", "old"))
    k.unmount("pod-a", "old", expect="Success")
    check(os.path.isdir(os.path.join(d, "empty-dir")), "a directory inside a filesystem went")
    check(len(mounted_at(d)) == 1, "a foreign filesystem was unmounted")
    umount(d)
    e.nothing_left("foreign filesystem")


@case
def gc_killed_at_any_point(e):
    """A SIGKILL anywhere in gc leaves a state the next gc finishes (and nothing in use touched)."""
    k = e.k
    env = dict(e.env, FLEXVOL_GC_GRACE="0")
    keep = bring_up(e, "keep", e.opts("keep", file="keep.img"))
    for delay_ms in (0, 1, 3, 6, 10, 20):
        for i in range(3):
            vol = "pv%d" % i
            bring_up(e, vol, e.opts(vol, file="v%d.img" % i))
            k.unmount("pod-a", vol, expect="Success")
            umount(k.gmp(vol))
        p = subprocess.Popen([e.bin, "gc"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             stdin=subprocess.DEVNULL)
        time.sleep(delay_ms / 1000)
        p.kill()
        p.communicate()
        gc(e, grace=0)
        check(list(e.loops()) == [keep], "gc killed at %d ms, then gc: %r" % (delay_ms, e.loops()))
        check(len(mounted_at(k.poddir("pod-a", "keep"))) == 1, "the volume in use kept")
    k.unmount("pod-a", "keep", expect="Success")
    k.unmountdevice("keep", expect="Success")
    k.detach("keep", expect="Success")
    e.nothing_left("gc killed")
