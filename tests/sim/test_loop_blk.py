"""Host-lane cases of the block-volume class's hardening (issue 17), on the loop driver.

Read-only binds that are never writable (point 3), mixed read-only and read-write pods of
one volume (point 8), unmountdevice that never drops the device mount before the release
(point 2a), lock waits in the log, and the smaller lies of point 9.  Real loop devices,
mkfs and mounts, in the runner's private mount namespace.
"""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flexsim import Driver, case_registry, check, mounted_at, mounts_under  # noqa: E402
import test_loop  # noqa: E402
from test_loop import as_older_version, bring_up  # noqa: E402

DRIVER = "loop"
CASES, case = case_registry()


class Env(test_loop.Env):
    def __init__(self, build, name, mode="controller"):
        super().__init__(build, name)
        if mode == "node":
            self.env["FLEXVOL_ATTACH_MODE"] = "node"
            self.drv = Driver(self.bin, self.env)
            self.k.drv = self.drv


def make_env(build, name):
    return Env(build, name, "node" if name.startswith("node_") else "controller")


# --- point 3: a read-only bind is never writable, not even for one syscall ---------

SYSCALL = re.compile(r"^\d+\s+(?:<\.\.\. )?([a-z0-9_]+)\(")


NO_NEW_API = ["-e", "inject=open_tree,mount_setattr:error=ENOSYS"]


def traced(env):
    """@env for a driver run under strace: LeakSanitizer refuses to run under ptrace (an ASan
    build exits 1 at its end), so leak checking is off there; everything else stays."""
    opts = env.get("ASAN_OPTIONS", "")
    return dict(env, ASAN_OPTIONS=(opts + ":" if opts else "") + "detect_leaks=0")


def syscalls_of(e, args, extra=()):
    """The syscalls one call of the driver makes, in order, as (name, n-th of that name)."""
    log = os.path.join(e.dir, "strace.out")
    subprocess.run(["strace", "-f", "-qq", "-o", log, *extra, "--", e.bin, *args],
                   env=traced(e.env), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True, timeout=60)
    seen, out = {}, []
    with open(log) as f:
        for line in f:
            m = SYSCALL.match(line)
            if not m or "resumed>" in line:
                continue
            name = m.group(1)
            seen[name] = seen.get(name, 0) + 1
            out.append((name, seen[name]))
    os.unlink(log)
    return out


# Syscalls after which a process's death leaves nothing the kill at the next syscall would not:
# they read, map or wait and change nothing outside the process (its memory, descriptors and
# locks all go with it). A SIGKILL on entry to one of them leaves the host as one on entry to the
# next syscall of another kind, so the kill points below skip them. Under the sanitizer builds
# they are most of a call's syscalls (ASan's start-up alone maps and reads some 300 times).
NO_STATE = frozenset("""
    mmap munmap mprotect madvise brk read pread64 readv fstat newfstatat statx statfs fstatfs
    lseek getrandom rt_sigaction rt_sigprocmask sigaltstack prlimit64 getpid gettid getppid
    getuid geteuid getgid getegid getcwd futex set_tid_address set_robust_list rseq arch_prctl
    uname readlink readlinkat sched_yield sched_getaffinity clock_gettime clock_nanosleep
    nanosleep access faccessat faccessat2 getdents64 poll ppoll sysinfo getrusage
""".split())


def kill_points(seq):
    """The (name, n) of @seq at which a SIGKILL can leave a state of its own (NO_STATE)."""
    return [(name, n) for name, n in seq if name not in NO_STATE]


def killed_at(e, args, name, n, extra=()):
    """Run the driver with SIGKILL delivered on entering the @n-th @name syscall."""
    subprocess.run(["strace", "-f", "-qq", "-o", "/dev/null", *extra,
                    "-e", "inject=%s:signal=KILL:when=%d" % (name, n), "--", e.bin, *args],
                   env=traced(e.env), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=60)


def never_writable(e, pd, what):
    for m in mounted_at(pd):
        check("ro" in m[3].split(","), "%s: '%s' is mounted writable: %r" % (what, pd, m))


def sigkill_every_syscall(e, mount, unmount, pd, extra=(), drv=None):
    """SIGKILL the read-only mount @mount (argv) at each of its kill points in turn: after each,
    the pod dir is unmounted or read-only, and a retry converges to a read-only bind."""
    drv = drv or e.drv
    seq = syscalls_of(e, mount, extra)
    drv.call(*unmount, expect="Success")
    check(len(seq) > 20, "strace saw the call: %r" % seq[:5])
    for name, n in kill_points(seq):
        if extra and name in ("open_tree", "mount_setattr"):
            continue  # failed by the injection already
        what = "killed at %s #%d" % (name, n)
        killed_at(e, mount, name, n, extra)
        never_writable(e, pd, what)
        drv.call(*mount, expect="Success")
        check(len(mounted_at(pd)) == 1, "%s: the retry mounted %r" % (what, mounted_at(pd)))
        never_writable(e, pd, what + ", then retried")
        drv.call(*unmount, expect="Success")
    return len(seq)


@case
def ro_bind_sigkill_at_every_syscall(e):
    """Issue 17 point 3: the read-only bind of a pod is one atomic step (open_tree,
    mount_setattr(MOUNT_ATTR_RDONLY), move_mount): SIGKILL at any syscall of the mount leaves the
    pod dir unmounted or read-only, and the retry (which kubelet skips when the dir is a mount
    point) is never needed to make it read-only."""
    k = e.k
    bring_up(e, uids=())
    pd = k.poddir("pod-r", "pv1")
    os.makedirs(pd)
    n = sigkill_every_syscall(e, ("mount", pd, e.opts(ro=True)), ("unmount", pd), pd)
    check(n > 0, "syscalls: %d" % n)
    k.unmountdevice("pv1", expect="Success")
    k.detach("pv1", expect="Success")
    e.nothing_left("ro bind killed")


@case
def node_ro_bind_sigkill_at_every_syscall(e):
    """Issue 17 point 3, node mode: a read-only pod next to a read-write one; SIGKILL at every
    syscall of its mount; the pod dir is never writable."""
    k = e.k
    k.mount("pod-w", "pv1", e.opts(), expect="Success")
    pd = k.poddir("pod-r", "pv1")
    os.makedirs(pd)
    sigkill_every_syscall(e, ("mount", pd, e.opts(ro=True)), ("unmount", pd), pd)
    k.unmount("pod-w", "pv1", expect="Success")
    e.nothing_left("node ro bind killed")


@case
def ro_bind_already_mounted_writable_is_made_ro(e):
    """Issue 17 point 3: a writable bind already on the pod dir (a killed two-step mount of an
    older version, an operator) is never answered Success for a read-only pod as it is."""
    k = e.k
    bring_up(e, uids=())
    pd = k.poddir("pod-r", "pv1")
    os.makedirs(pd)
    subprocess.run(["mount", "--bind", k.gmp("pv1"), pd], check=True)
    k.mount("pod-r", "pv1", e.opts(ro=True), expect="Success")
    never_writable(e, pd, "already bound rw")
    k.unmount("pod-r", "pv1", expect="Success")
    # and the other way round: a read-only bind for a read-write pod is a clear Failure
    subprocess.run(["mount", "--bind", "-o", "ro", k.gmp("pv1"), pd], check=True)
    r = k.mount("pod-r", "pv1", e.opts(), expect="Failure")
    check("read-only" in r["message"], r["message"])
    k.unmount("pod-r", "pv1", expect="Success")
    k.unmountdevice("pv1", expect="Success")
    k.detach("pv1", expect="Success")
    e.nothing_left("already bound")


@case
def ro_bind_without_new_mount_api(e):
    """Issue 17 point 3, the fallback for kernels without open_tree/mount_setattr (< 5.12):
    a private staging mount made read-only, then moved into the pod dir; SIGKILL at any of its
    syscalls leaves the pod dir unmounted or read-only and nothing in the staging dir."""
    k = e.k
    bring_up(e, uids=())
    pd = k.poddir("pod-r", "pv1")
    os.makedirs(pd)
    wrapper = os.path.join(e.dir, "old-kernel")
    with open(wrapper, "w") as f:
        f.write("#!/bin/sh\nexec strace -f -qq -o /dev/null %s -- %s \"$@\"\n"
                % (" ".join(NO_NEW_API), e.bin))
    os.chmod(wrapper, 0o755)
    drv = Driver(wrapper, traced(e.env), name="loop")
    o = e.opts(ro=True)
    sigkill_every_syscall(e, ("mount", pd, o), ("unmount", pd), pd, NO_NEW_API, drv)
    staging = os.path.join(e.run, "loop", "staging")
    check([m[0] for m in mounts_under(e.run)] == [staging],
          "only the private staging root stays mounted: %r" % mounts_under(e.run))
    # a run dir reached through a symlink (/var/run) still stages on one private root mount
    link = os.path.join(e.dir, "runlink")
    os.symlink(e.run, link)
    env = dict(traced(e.env), FLEXVOL_RUN_DIR=link)
    for _ in range(3):
        drv.call("mount", pd, o, expect="Success", env=env)
        never_writable(e, pd, "fallback, symlinked run dir")
        drv.call("unmount", pd, expect="Success", env=env)
    check([m[0] for m in mounts_under(e.run)] == [staging],
          "one staging root mount: %r" % mounts_under(e.run))
    subprocess.run(["umount", staging], check=True)
    k.unmountdevice("pv1", expect="Success")
    k.detach("pv1", expect="Success")
    e.nothing_left("fallback")



# --- point 2(a): unmountdevice releases before its umount is final -----------------

def gmp_mounted(e, vol="pv1"):
    return bool(mounted_at(e.k.gmp(vol)))


@case
def unmountdevice_refused_while_a_pod_holds_the_device(e):
    """Issue 17 point 2(a): unmountdevice while a pod's bind still holds the device (a restarted
    kubelet, an operator) is refused BEFORE the device mount is touched: the global path stays
    mounted, new pods of the volume still mount, and mountdevice still answers Success."""
    k = e.k
    o = e.opts()
    dev = bring_up(e, uids=("pod-a",))
    r = k.unmountdevice("pv1", expect="Failure")
    check("pod-a" in r["message"] or "still" in r["message"], r["message"])
    check(gmp_mounted(e), "the device mount was dropped: %r" % mounts_under(e.dir))
    check(dev in e.loops(), "the binding went: %r" % e.loops())
    k.mountdevice("pv1", dev, o, expect="Success")
    k.mount("pod-b", "pv1", o, expect="Success")
    for uid in ("pod-a", "pod-b"):
        k.unmount(uid, "pv1", expect="Success")
    k.unmountdevice("pv1", expect="Success")
    k.detach("pv1", expect="Success")
    e.nothing_left("pod held the device")


@case
def unmountdevice_keeps_a_file_named_like_a_raw_block_stage(e):
    """A filesystem volume whose root holds a file named "device", the name a raw block
    volume's stage binds its node on (src/blkvol-raw.c): unmountdevice never looks into the
    mounted global path, the file is there after the next mountdevice. (d6acfa2 removed it and
    then refused the release: the mount was still there.)"""
    k = e.k
    o = e.opts()
    dev = bring_up(e, uids=())
    with open(os.path.join(k.gmp("pv1"), "device"), "w") as f:
        f.write("a tenant's file")
    k.unmountdevice("pv1", expect="Success")
    k.mountdevice("pv1", dev, o, expect="Success")
    with open(os.path.join(k.gmp("pv1"), "device")) as f:
        check(f.read() == "a tenant's file", "the tenant's file changed")
    k.unmountdevice("pv1", expect="Success")
    k.detach("pv1", expect="Success")
    e.nothing_left("a file named device")


def unmountdevice_syscalls(e):
    """(name, n) of each syscall of one unmountdevice, from its umount2 on."""
    bring_up(e, uids=())
    seq = syscalls_of(e, ("unmountdevice", e.k.gmp("pv1")))
    e.k.detach("pv1", expect="Success")
    e.nothing_left("traced unmountdevice")
    first = [i for i, (name, _) in enumerate(seq) if name == "umount2"]
    check(first, "unmountdevice made no umount2: %r" % seq)
    return seq[first[0]:]


@case
def unmountdevice_killed_after_the_umount_leaks_nothing(e):
    """Issue 17 point 2(a): SIGKILL at each kill point of unmountdevice from its umount2 on: either
    the device mount is still there (kubelet calls unmountdevice again) or the loop binding is
    gone too - never an unmounted global path with the attachment left behind (kubelet's retry
    sees no mount point and never calls the driver again)."""
    k = e.k
    for name, n in kill_points(unmountdevice_syscalls(e)):
        what = "unmountdevice killed at %s #%d" % (name, n)
        bring_up(e, uids=())
        killed_at(e, ("unmountdevice", k.gmp("pv1")), name, n)
        if gmp_mounted(e):
            k.unmountdevice("pv1", expect="Success")  # kubelet's retry
        check(not e.loops(), "%s: loop binding leaked: %r" % (what, e.loops()))
        k.detach("pv1", expect="Success")
        e.nothing_left(what)


@case
def unmountdevice_failing_release_puts_the_mount_back(e):
    """Issue 17 point 2(a): a release that fails after the umount (a fake: every ioctl from the
    loop autoclear on fails with EIO, so the kernel does not release it either) puts the device
    mount back and answers Failure, so kubelet calls unmountdevice again; the retry releases.
    Since issue 29 the autoclear is set when mountdevice binds; a binding of an older version
    still gets it in unmountdevice, and that is the one failed here."""
    k = e.k
    dev = bring_up(e, uids=())
    as_older_version(dev)
    log = os.path.join(e.dir, "strace.out")
    subprocess.run(["strace", "-f", "-qq", "-e", "trace=ioctl,umount2", "-o", log, "--", e.bin,
                    "unmountdevice", k.gmp("pv1")], env=traced(e.env), stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=60)
    with open(log) as f:
        calls = [line.split(None, 1)[1] for line in f if SYSCALL.match(line)]
    umount = [i for i, c in enumerate(calls) if c.startswith("umount2")][0]
    # the last ioctl before umount2 is the autoclear (LOOP_SET_STATUS64): it and all later ones fail
    check(calls[umount - 1].startswith("ioctl") and "LOOP_SET_STATUS64" in calls[umount - 1],
          "the older binding's autoclear comes right before the umount: %r" % calls[:umount + 1])
    n = max(1, len([c for c in calls[:umount] if c.startswith("ioctl")]))
    k.detach("pv1", expect="Success")
    e.nothing_left("traced")
    dev = bring_up(e, uids=())
    as_older_version(dev)
    p = subprocess.run(["strace", "-f", "-qq", "-o", "/dev/null", "-e",
                        "inject=ioctl:error=EIO:when=%d+" % n, "--", e.bin, "unmountdevice",
                        k.gmp("pv1")], env=traced(e.env), stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=60)
    out = p.stdout.decode()
    check('"Failure"' in out, "a failed release answers Failure: %s" % out)
    check(gmp_mounted(e), "the device mount is back for kubelet's retry: %s" % out)
    check(dev in e.loops(), "the binding is still there: %r" % e.loops())
    k.unmountdevice("pv1", expect="Success")
    check(not e.loops(), "released by the retry: %r" % e.loops())
    k.detach("pv1", expect="Success")
    e.nothing_left("failing release")


def ioctls_of(e, args):
    log = os.path.join(e.dir, "strace.out")
    subprocess.run(["strace", "-f", "-qq", "-e", "trace=ioctl", "-o", log, "--", e.bin, *args],
                   env=traced(e.env), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True, timeout=60)
    with open(log) as f:
        calls = [line.split(None, 1)[1] for line in f if SYSCALL.match(line)]
    os.unlink(log)
    return calls


@case
def claim_and_release_freeze_no_queue(e):
    """Issue 29: LOOP_SET_STATUS64 on a bound device drains and freezes its queue (15-25 ms).
    mountdevice's claim of waitforattach's binding and unmountdevice's release with the last
    umount use none: the claim binds the image again with LOOP_CONFIGURE (claimed,
    LO_FLAGS_AUTOCLEAR), and unmountdevice then has nothing to set."""
    k = e.k
    o = e.opts()
    dev = k.waitforattach("loop:vol1.img", o, expect="Success")["device"]
    os.makedirs(k.gmp("pv1"), exist_ok=True)  # kubelet makes it before mountdevice
    calls = ioctls_of(e, ("mountdevice", k.gmp("pv1"), dev, o))
    check(gmp_mounted(e), "mounted")
    check(not [c for c in calls if "LOOP_SET_STATUS64" in c], "mountdevice: %r" % calls)
    check([c for c in calls if "LOOP_CONFIGURE" in c and "LO_FLAGS_AUTOCLEAR" in c],
          "mountdevice binds with autoclear: %r" % calls)
    calls = ioctls_of(e, ("unmountdevice", k.gmp("pv1")))
    check(not [c for c in calls if "LOOP_SET_STATUS64" in c], "unmountdevice: %r" % calls)
    check(not e.loops(), "released with the umount: %r" % e.loops())
    k.detach("pv1", expect="Success")
    e.nothing_left("no freeze")


@case
def mountdevice_killed_at_every_syscall_leaks_nothing(e):
    """Issue 29: mountdevice releases waitforattach's binding and binds the image again,
    claimed and released by the kernel at its last close, its device held open until the mount
    holds it.  SIGKILL at its syscalls from its first ioctl on (each ioctl, mount and close,
    every 4th of the others): the device mount is
    there, and its umount alone releases the binding; or it is not, and kubelet's retry mounts.
    Nothing is left after unmountdevice and detach."""
    k = e.k
    o = e.opts()
    bring_up(e, uids=())  # formatted once: the kill points are the claim's, not mkfs's
    k.unmountdevice("pv1", expect="Success")
    k.detach("pv1", expect="Success")
    dev = k.waitforattach("loop:vol1.img", o, expect="Success")["device"]
    os.makedirs(k.gmp("pv1"), exist_ok=True)  # kubelet makes it before mountdevice
    seq = syscalls_of(e, ("mountdevice", k.gmp("pv1"), dev, o))
    k.unmountdevice("pv1", expect="Success")
    k.detach("pv1", expect="Success")
    first = [i for i, (name, _) in enumerate(seq) if name == "ioctl"]
    check(first, "mountdevice made no ioctl: %r" % seq)
    # every ioctl, mount and close (the claim's steps, the hold's end), every 4th other syscall
    points = [(name, n) for i, (name, n) in enumerate(seq[first[0]:])
              if name in ("ioctl", "mount", "move_mount", "close") or i % 4 == 0]
    for name, n in points:
        what = "mountdevice killed at %s #%d" % (name, n)
        dev = k.waitforattach("loop:vol1.img", o, expect="Success")["device"]
        killed_at(e, ("mountdevice", k.gmp("pv1"), dev, o), name, n)
        if not gmp_mounted(e):
            k.mountdevice("pv1", dev, o, expect="Success")  # kubelet's retry
        k.unmountdevice("pv1", expect="Success")
        check(not e.loops(), "%s: binding left after unmountdevice: %r" % (what, e.loops()))
        k.detach("pv1", expect="Success")
        e.nothing_left(what)


# --- point 8: mixed read-only and read-write pods of one volume --------------------
#
# docs/flexvolume-contract.md, the sequence these cases drive (§4.1, §2):
#
#   2. kubelet waits until the volume is listed as attached to its node, then
#      `waitforattach <device> <json>` (10 min deadline) and uses the returned device.
#   3. kubelet creates the device mount path (`mkdir -p`), skips the next call if that
#      path is already a mount point, else `mountdevice <path> <device> <json>`.
#   4. kubelet creates the pod dir, skips if it is already a mount point, else
#      `mount <poddir> <json with pod keys, secrets, fsGroup>`
#
#   | `kubernetes.io/readwrite` | `ro` or `rw`; for a PV this comes from the pod's claim
#   `readOnly`, **not** from the PV's `flexVolume.readOnly` | every op with JSON |
#
# So each pod's waitforattach carries that pod's readwrite; mountdevice runs once per
# device, with the options of whichever pod came first; mount runs per pod.

def formatted(e, vol="pv1"):
    """An image holding a filesystem (a read-only first pod has nothing to mount on a blank one)."""
    k = e.k
    o = e.opts(vol)
    bring_up(e, vol, o, uids=())
    k.unmountdevice(vol, expect="Success")
    k.detach(vol, expect="Success")


def kubelet_pod_up(e, uid, ro, vol="pv1", handle=None, extra=None):
    """kubelet's real per-pod sequence for an attachable volume (§4.1 steps 2-4)."""
    k = e.k
    o = e.opts(vol, ro=ro, extra=extra)
    handle = handle or k.attach(o, expect="Success")["device"]
    w = k.waitforattach(handle, o)
    if w.status != "Success":
        return w  # kubelet shows this message on the pod and retries
    if not mounted_at(k.gmp(vol)):
        r = k.mountdevice(vol, w["device"], o)
        if r.status != "Success":
            return r
    return k.mount(uid, vol, e.opts(vol, ro=ro, pod=uid, extra=extra))


def writable(path):
    try:
        with open(os.path.join(path, "probe-%d" % os.getpid()), "w") as f:
            f.write("x")
        os.unlink(f.name)
        return True
    except OSError as err:
        check(err.errno == 30, "EROFS expected, got %r" % err)
        return False


def mixed_pods(e, order, up, down):
    """Pods asking ro and rw for one volume at once, in @order; each gets its own mode."""
    formatted(e)
    for uid, ro in order:
        r = up(uid, ro)
        check(r.status == "Success", "pod %s (%s) after %r: %r" % (uid, "ro" if ro else "rw",
                                                                  order, r))
    for uid, ro in order:
        pd = e.k.poddir(uid, "pv1")
        check(writable(pd) == (not ro), "pod %s wants %s: %r" % (uid, "ro" if ro else "rw",
                                                               mounted_at(pd)))
    for uid, _ in reversed(order):
        down(uid)


def controller_down(e, uid):
    e.k.unmount(uid, "pv1", expect="Success")
    if not mounts_under(os.path.join(e.kubelet, "pods")):
        e.k.unmountdevice("pv1", expect="Success")
        e.k.detach("pv1", expect="Success")


@case
def mixed_ro_rw_pods_controller_mode(e):
    """Issue 17 point 8, controller mode: kubelet's per-pod waitforattach with each pod's
    readwrite, mountdevice once, mount per pod; ro then rw and rw then ro both work, each pod
    gets its own mode, and the volume is released after the last pod."""
    for order in ([("pod-r", True), ("pod-w", False)], [("pod-w", False), ("pod-r", True)]):
        mixed_pods(e, order, lambda uid, ro: kubelet_pod_up(e, uid, ro),
                   lambda uid: controller_down(e, uid))
        e.nothing_left("mixed %r" % order)


@case
def node_mixed_ro_rw_pods(e):
    """Issue 17 point 8, node mode: mount and unmount per pod (§4.3); both orders work."""
    k = e.k
    for order in ([("pod-r", True), ("pod-w", False)], [("pod-w", False), ("pod-r", True)]):
        mixed_pods(e, order, lambda uid, ro: k.mount(uid, "pv1", e.opts(ro=ro, pod=uid)),
                   lambda uid: k.unmount(uid, "pv1", expect="Success"))
        e.nothing_left("mixed %r" % order)


def read_only_everywhere(e, up, down):
    """A PV read-only for every pod (its options set kubernetes.io/readwrite: ro, which wins
    over kubelet's key, §2): every bind and the device mount stay read-only."""
    formatted(e)
    ro = {"kubernetes.io/readwrite": "ro"}
    for uid in ("pod-a", "pod-b"):
        r = up(uid, ro)
        check(r.status == "Success", "pod %s: %r" % (uid, r))
        check(not writable(e.k.poddir(uid, "pv1")), "pod %s is writable" % uid)
    for m in mounts_under(e.dir):
        check("ro" in m[3].split(","), "a read-write mount of a read-only PV: %r" % (m,))
    for uid in ("pod-b", "pod-a"):
        down(uid)
    e.nothing_left("read-only PV")


@case
def read_only_pv_controller_mode(e):
    """Issue 17 point 8: a PV read-only for everyone, controller mode."""
    read_only_everywhere(e, lambda uid, x: kubelet_pod_up(e, uid, False, extra=x),
                         lambda uid: controller_down(e, uid))


@case
def node_read_only_pv(e):
    """Issue 17 point 8: a PV read-only for everyone, node mode."""
    read_only_everywhere(e, lambda uid, x: e.k.mount(uid, "pv1", e.opts(pod=uid, extra=x)),
                         lambda uid: e.k.unmount(uid, "pv1", expect="Success"))


def unwritable_image(e, up, down):
    """A real conflict: the image cannot be written on this node (its directory is a read-only
    mount): read-only pods work, a read-write pod gets a Failure that says why."""
    formatted(e)
    subprocess.run(["mount", "--bind", "-o", "ro", e.root, e.root], check=True)
    try:
        r = up("pod-r", True)
        check(r.status == "Success", "ro pod on an unwritable image: %r" % r)
        r = up("pod-w", False)
        check(r.status == "Failure", "rw pod on an unwritable image: %r" % r)
        msg = r["message"]
        check("read-only" in msg and "read-write" in msg, "the conflict is not named: " + msg)
        check(not writable(e.k.poddir("pod-r", "pv1")), "ro pod writable")
        down("pod-r")
    finally:
        subprocess.run(["umount", e.root], check=True)
    e.nothing_left("unwritable image")


@case
def unwritable_image_conflict_controller_mode(e):
    """Issue 17 point 8: a real conflict says so, controller mode."""
    unwritable_image(e, lambda uid, ro: kubelet_pod_up(e, uid, ro),
                     lambda uid: controller_down(e, uid))


@case
def node_unwritable_image_conflict(e):
    """Issue 17 point 8: a real conflict says so, node mode."""
    unwritable_image(e, lambda uid, ro: e.k.mount(uid, "pv1", e.opts(ro=ro, pod=uid)),
                     lambda uid: e.k.unmount(uid, "pv1", expect="Success"))


# --- point 8's log point: a wait for a volume lock leaves a line ----------------------

@case
def lock_wait_is_logged(e):
    """Issue 17 point 8: a call that has to wait for a volume lock (up to lock_timeout, 150 s
    by default) says so in the log, without debug; one that need not wait says nothing."""
    import fcntl
    import threading
    import time
    k = e.k
    locks = os.path.join(e.run, "locks")
    os.makedirs(locks)
    os.makedirs(k.gmp("pv1"))
    fd = os.open(os.path.join(locks, "loop-vol-pv1.lock"), os.O_RDONLY | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    threading.Timer(0.7, os.close, (fd,)).start()
    t0 = time.monotonic()
    k.mountdevice("pv1", "", e.opts(), expect="Success")
    check(time.monotonic() - t0 >= 0.6, "the call did not wait")
    with open(e.log) as f:
        log = f.read()
    waits = [line for line in log.splitlines() if "waiting" in line and "lock" in line]
    check(len(waits) == 1 and "loop-vol-pv1" in waits[0], "no lock-wait line:\n" + log)
    got = [line for line in log.splitlines() if "got lock" in line]
    check(len(got) == 1 and "loop-vol-pv1" in got[0], "no line for the lock taken:\n" + log)
    k.unmountdevice("pv1", expect="Success")
    k.detach("pv1", expect="Success")
    with open(e.log) as f:
        check(f.read().count("waiting") == 1, "an uncontended lock was logged")
    e.nothing_left("lock wait")


# --- point 9: smaller lies --------------------------------------------------------

STATMOUNT = 457  # the same number on every architecture; strace 6.1 has no name for it


def failing_syscall(nr, err):
    """A preexec_fn: from the exec on, system call @nr fails with @err (a seccomp filter: load
    the call's number, compare, return ERRNO or ALLOW), whatever strace is put in between."""
    import ctypes
    import struct

    prog = b"".join(struct.pack("HBBI", *ins) for ins in (
        (0x20, 0, 0, 0),                      # BPF_LD | BPF_W | BPF_ABS: seccomp_data.nr
        (0x15, 0, 1, nr),                     # BPF_JMP | BPF_JEQ | BPF_K
        (0x06, 0, 0, 0x00050000 | err),       # BPF_RET: SECCOMP_RET_ERRNO
        (0x06, 0, 0, 0x7fff0000)))            # BPF_RET: SECCOMP_RET_ALLOW
    buf = ctypes.create_string_buffer(prog)

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = Fprog(len(prog) // 8, ctypes.addressof(buf))
    libc = ctypes.CDLL(None, use_errno=True)

    def pre():
        if libc.prctl(38, 1, 0, 0, 0) or libc.prctl(22, 2, ctypes.byref(fprog), 0, 0):
            os._exit(99)  # PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP(SECCOMP_MODE_FILTER)
    pre.keep = buf  # the program lives as long as the function that installs it
    return pre


def mountinfo_reads(e, args, pre=None):
    """How many times one call of the driver opens /proc/self/mountinfo."""
    log = os.path.join(e.dir, "strace.out")
    subprocess.run(["strace", "-f", "-qq", "-o", log, "-P", "/proc/self/mountinfo", "--", e.bin,
                    *args], env=traced(e.env), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True, timeout=60, preexec_fn=pre)
    with open(log) as f:
        n = sum(1 for line in f if "openat(" in line and "mountinfo" in line)
    os.unlink(log)
    return n


@case
def node_unreadable_mount_table_is_not_unused(e):
    """Issue 17 point 9: a mount table that cannot be read is an error, never "not in use": the
    unmount of one of two pods, with each read of /proc/self/mountinfo failing in turn (EIO,
    injected by strace), never takes the device mount from the other pod; here with
    statmount(2) refused as a kernel before 6.8 refuses it (ENOSYS), so that every lookup reads
    the table.  And with statmount failing (EIO): a Failure, nothing unmounted."""
    k = e.k
    o = e.opts()
    for uid in ("pod-a", "pod-b"):
        k.mount(uid, "pv1", o, expect="Success")
    pa, pb = k.poddir("pod-a", "pv1"), k.poddir("pod-b", "pv1")
    p = subprocess.run([e.bin, "unmount", pa], env=e.env, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=60,
                       preexec_fn=failing_syscall(STATMOUNT, 5))
    check(json.loads(p.stdout).get("status") == "Failure" and not p.stderr,
          "unmount with statmount failing: %r %r" % (p.stdout, p.stderr))
    check(mounted_at(pb) and mounted_at(e.devmount()),
          "statmount failing: the device mount or pod-b's went: %r" % mounts_under(e.dir))
    if not mounted_at(pa):
        k.mount("pod-a", "pv1", o, expect="Success")
    pre = failing_syscall(STATMOUNT, 38)
    n = mountinfo_reads(e, ("unmount", pa), pre)
    check(n >= 2, "unmount read the mount table %d times" % n)
    k.mount("pod-a", "pv1", o, expect="Success")
    for i in range(1, n + 1):
        subprocess.run(["strace", "-f", "-qq", "-o", "/dev/null", "-P", "/proc/self/mountinfo",
                        "-e", "inject=openat:error=EIO:when=%d" % i, "--", e.bin, "unmount", pa],
                       env=traced(e.env), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=60, preexec_fn=pre)
        what = "mount table read #%d failed" % i
        check(mounted_at(e.devmount()), "%s: the device mount went: %r"
              % (what, mounts_under(e.dir)))
        check(mounted_at(pb) and os.listdir(pb) is not None, "%s: pod-b lost its volume" % what)
        k.unmount("pod-a", "pv1", expect="Success")
        k.mount("pod-a", "pv1", o, expect="Success")
    for uid in ("pod-a", "pod-b"):
        k.unmount(uid, "pv1", expect="Success")
    e.nothing_left("unreadable mount table")


@case
def runner_on_an_empty_run(e):
    """Issue 17 point 9: tests/sim/run.py on a fresh root whose /run is empty (a minimal Debian
    root) makes /run/lock for its lock instead of failing."""
    here = os.path.dirname(os.path.abspath(__file__))
    build = os.path.dirname(e.bin)
    p = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                        'mount -t tmpfs none /run && exec "$@"', "sh", sys.executable,
                        os.path.join(here, "run.py"), "--build", build, "-k",
                        "unsupported_and_unknown"],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=120)
    out = p.stdout.decode(errors="replace")
    check(p.returncode == 0 and "1 passed, 0 failed" in out, "run.py on an empty /run:\n" + out)


@case
def lock_files_do_not_pile_up(e):
    """Issue 17 point 9: the lock files of the dispatcher's locks (one per pod dir ever
    mounted, one per volume) exist only while an operation holds them."""
    k = e.k
    uids = ["pod-%d" % i for i in range(5)]
    bring_up(e, uids=uids)
    for uid in uids:
        k.unmount(uid, "pv1", expect="Success")
    k.unmountdevice("pv1", expect="Success")
    k.detach("pv1", expect="Success")
    locks = os.path.join(e.run, "locks")
    left = sorted(f for f in os.listdir(locks) if f.startswith("loop-dir-") or
                  f.startswith("loop-vol-")) if os.path.isdir(locks) else []
    check(not left, "lock files left in %s: %r" % (locks, left))
    e.nothing_left("lock files")


def state_files(e):
    out = []
    for d, _, files in os.walk(e.state):
        out += [os.path.join(d, f) for f in files]
    return sorted(out)


@case
def state_tmp_files_do_not_pile_up(e):
    """Issue 17 point 9: a record is written atomically without leaving its temporary file
    behind: SIGKILL at each kill point of a waitforattach (which writes a record) in turn, and
    after its retry no '*.tmp.<pid>' is left in the state dir."""
    k = e.k
    o = e.opts()
    k.waitforattach("loop:vol1.img", o, expect="Success")
    args = ("waitforattach", "loop:vol1.img", o)
    for name, n in kill_points(syscalls_of(e, args)):
        killed_at(e, args, name, n)
        k.waitforattach("loop:vol1.img", o, expect="Success")
        tmp = [f for f in state_files(e) if ".tmp." in f]
        check(not tmp, "killed at %s #%d: left %r" % (name, n, tmp))
    k.detach("pv1", expect="Success")
    e.nothing_left("tmp files")


@case
def hinted_record_goes_with_the_claim(e):
    """Issue 17 point 9: waitforattach records its attach under the options' volume name (a
    hint, '?<name>'); once mountdevice claims the device under kubelet's name, that record has
    no use, and it must not stay in the state dir forever when the names differ."""
    k = e.k
    o = e.opts(extra={"kubernetes.io/pvOrVolumeName": "other-name"})
    dev = k.waitforattach("loop:vol1.img", o, expect="Success")["device"]
    check([f for f in state_files(e) if "other-name" in f], "no hinted record: %r" % state_files(e))
    k.mountdevice("pv1", dev, o, expect="Success")
    k.unmountdevice("pv1", expect="Success")
    k.detach("pv1", expect="Success")
    check(not state_files(e), "records left: %r" % state_files(e))
    e.nothing_left("hinted record")


@case
def read_only_binding_in_use_serves_read_only_pods(e):
    """Issue 17 point 8: a loop device bound read-only while the image could not be written
    (or by an older version) and in use: a further read-only pod reuses it, a read-write pod is
    told why not, even once the image can be written again."""
    k = e.k
    formatted(e)
    subprocess.run(["mount", "--bind", "-o", "ro", e.root, e.root], check=True)
    r = kubelet_pod_up(e, "pod-r", True)
    check(r.status == "Success", "ro pod: %r" % r)
    subprocess.run(["umount", "-l", e.root], check=True)  # the image is writable again
    r = kubelet_pod_up(e, "pod-r2", True)
    check(r.status == "Success", "second ro pod: %r" % r)
    r = kubelet_pod_up(e, "pod-w", False)
    check(r.status == "Failure" and "read-only" in r["message"] and "read-write" in r["message"],
          "rw pod: %r" % r)
    for uid in ("pod-r2", "pod-r"):
        controller_down(e, uid)
    e.nothing_left("ro binding in use")


@case
def mountdevice_with_a_pod_of_the_same_volume_still_bound(e):
    """Issue 17 point 2(a), the other half of the torture finding: the global path unmounted
    behind kubelet's back (an operator, an older version's unmountdevice) while a pod of the
    same volume still holds the device; kubelet then calls mountdevice, which must mount it
    again, not refuse the device as mounted 'for another volume'."""
    k = e.k
    o = e.opts()
    dev = bring_up(e, uids=("pod-a",))
    subprocess.run(["umount", k.gmp("pv1")], check=True)
    r = k.mountdevice("pv1", dev, o)
    check(r.status == "Success", "mountdevice refused: %r" % r)
    check(gmp_mounted(e), "not mounted again")
    k.mount("pod-b", "pv1", o, expect="Success")
    for uid in ("pod-a", "pod-b"):
        k.unmount(uid, "pv1", expect="Success")
    k.unmountdevice("pv1", expect="Success")
    k.detach("pv1", expect="Success")
    e.nothing_left("remounted")
