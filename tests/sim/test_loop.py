"""Host-lane cases of the loop driver (run by tests/sim/run.py).

Real loop devices, real mkfs, real mounts, in the runner's private mount
namespace.  Each case gets its own scratch tree; whatever it leaves bound or
mounted under it is released afterwards, by name, even when it fails.
"""
import base64
import fcntl
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flexsim import (Driver, Fail, Kubelet, case_registry, check, cleanup, go_json, in_parallel,  # noqa: E402
                     loop_ro, loops_under, mounted_at, mounts_under)

DRIVER = "loop"
CASES, case = case_registry()


class Env:
    """One case's world: scratch dirs, the driver, the kubelet."""

    def __init__(self, build, name):
        self.dir = tempfile.mkdtemp(prefix="flexsim-%s." % name, dir="/tmp")
        self.root = os.path.join(self.dir, "images")
        self.state = os.path.join(self.dir, "state")
        self.run = os.path.join(self.dir, "run")
        self.log = os.path.join(self.dir, "log", "loop.log")
        self.kubelet = os.path.join(self.dir, "kubelet")
        os.makedirs(self.root)
        os.makedirs(self.kubelet)
        self.node = os.uname().nodename
        self.env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "FLEXVOL_LOOP_ROOT": self.root,
                    "FLEXVOL_STATE_DIR": self.state, "FLEXVOL_RUN_DIR": self.run,
                    "FLEXVOL_LOG_FILE": self.log, "FLEXVOL_CONFIG": "/dev/null"}
        if os.environ.get("ASAN_OPTIONS") is not None:
            self.env["ASAN_OPTIONS"] = os.environ["ASAN_OPTIONS"]
        if os.environ.get("UBSAN_OPTIONS") is not None:
            self.env["UBSAN_OPTIONS"] = os.environ["UBSAN_OPTIONS"]
        self.bin = os.path.join(build, "loop")
        self.drv = Driver(self.bin, self.env)
        self.k = Kubelet(self.drv, self.kubelet, self.node)

    def devmount(self, vol="pv1"):
        """The driver's own device mount of @vol (under its run dir: mounts/<name>/<image>)."""
        d = os.path.join(self.run, "loop", "mounts", vol)
        subs = os.listdir(d) if os.path.isdir(d) else []
        return os.path.join(d, subs[0]) if len(subs) == 1 else os.path.join(d, "?")

    def opts(self, vol="pv1", file="vol1.img", size="64Mi", fstype="ext4", ro=False, extra=None, **kw):
        user = {"file": file}
        if size is not None:
            user["size"] = size
        user.update(extra or {})
        return self.k.options(vol, user, fstype=fstype, ro=ro, **kw)

    def image(self, name="vol1.img"):
        return os.path.join(self.root, name)

    def loops(self):
        return loops_under(self.dir)

    def nothing_left(self, what):
        check(not self.loops(), "%s: loop devices left bound: %s" % (what, self.loops()))
        check(not mounts_under(self.dir), "%s: mounts left: %s" % (what, mounts_under(self.dir)))

    def close(self):
        ok = cleanup(self.dir)
        shutil.rmtree(self.dir, ignore_errors=True)
        return ok


# --- helpers composing the kubelet flow ------------------------------------

def twice(fn, *a, **kw):
    """Every call in the lifecycle runs twice: the second must succeed as well."""
    r1 = fn(*a, **kw)
    r2 = fn(*a, **kw)
    return r1, r2


def bring_up(e, vol="pv1", opts=None, uids=("pod-a",)):
    """KCM attach, then kubelet waitforattach -> mountdevice -> mount (§4.1)."""
    k = e.k
    opts = opts or e.opts(vol)
    a = k.attach(opts, expect="Success")
    check(a.get("device"), "attach returns a device handle")
    w = k.waitforattach(a["device"], opts, expect="Success")
    dev = w.get("device", "")
    check(dev.startswith("/dev/loop"), "waitforattach echoes the real device, got %r" % dev)
    k.mountdevice(vol, dev, opts, expect="Success")
    for uid in uids:
        k.mount(uid, vol, opts, expect="Success")
    return dev


LOOP_SET_STATUS64, LOOP_GET_STATUS64 = 0x4C04, 0x4C05
LO_FLAGS_AUTOCLEAR = 4
LOOP_INFO64_SIZE, LO_FLAGS_OFFSET = 232, 52  # struct loop_info64, its lo_flags


def as_older_version(dev):
    """Make the binding of @dev one an older version made: no LO_FLAGS_AUTOCLEAR from its bind
    (it set the flag in unmountdevice, right before the umount)."""
    buf = bytearray(LOOP_INFO64_SIZE)
    fd = os.open(dev, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, LOOP_GET_STATUS64, buf)
        flags = struct.unpack_from("<I", buf, LO_FLAGS_OFFSET)[0]
        struct.pack_into("<I", buf, LO_FLAGS_OFFSET, flags & ~LO_FLAGS_AUTOCLEAR)
        fcntl.ioctl(fd, LOOP_SET_STATUS64, buf)
    finally:
        os.close(fd)


def tear_down(e, vol="pv1", uids=("pod-a",)):
    k = e.k
    for uid in uids:
        k.unmount(uid, vol, expect="Success")
    k.unmountdevice(vol, expect="Success")
    k.detach(vol, expect="Success")


# --- cases -------------------------------------------------------------------

@case
def init_capabilities(e):
    """§8: init -> Success, explicit boolean capabilities, works with an empty environment and cwd /."""
    r = e.drv.call("init", expect="Success", env={})
    caps = r["capabilities"]
    check(caps == {"attach": True, "selinuxRelabel": True, "supportsMetrics": True,
                   "fsGroup": True, "requiresFSResize": True}, "loop capabilities: %r" % caps)
    e.drv.call("init", expect="Success")


@case
def unsupported_and_unknown(e):
    """§1.2: getvolumename's answer is ignored (default: the PV name); expandvolume is never called upstream."""
    o = e.opts()
    e.drv.call("getvolumename", o, expect="Not supported")
    e.drv.call("expandvolume", o, "/x", "2", "1", expect="Not supported")
    e.drv.call("frobnicate", expect="Not supported")
    e.drv.call("frobnicate", "a", "b", "c", expect="Not supported")
    r = e.drv.call(expect="Failure")
    check("operation" in r["message"], r["message"])


@case
def fixed_answers_touch_nothing(e):
    """init and Not supported read no config and open no log, nor do the KCM's successful
    calls (issue 11); a failure is logged; FLEXVOL_DEBUG logs every call."""
    conf = os.path.join(e.dir, "flexvol.conf")
    with open(conf, "w") as f:
        f.write("not a config line\n")  # would fail any op that reads it
    env = dict(e.env, FLEXVOL_CONFIG=conf)
    for env_ in (e.env, env):
        e.drv.call("init", expect="Success", env=env_)
        e.drv.call("getvolumename", e.opts(), expect="Not supported", env=env_)
        e.drv.call("frobnicate", expect="Not supported", env=env_)
    check(not os.path.exists(os.path.dirname(e.log)), "init/Not supported opened the log")
    # the controller-manager's successful calls change nothing here: not logged either
    e.drv.call("attach", e.opts(), "othernode", expect="Success")
    e.drv.call("isattached", e.opts(), "othernode", expect="Success")
    e.drv.call("detach", "pv1", "othernode", expect="Success")
    check(not os.path.exists(os.path.dirname(e.log)), "controller-side calls opened the log")
    r = e.drv.call("attach", '{"file": "../x"}', "othernode", expect="Failure")
    with open(e.log) as f:
        log = f.read()
    check(" op=attach " in log and "status=Failure" in log, log)
    r = e.drv.call("attach", e.opts(), "othernode", expect="Failure", env=env)
    check("expected 'key = value'" in r["message"], r["message"])
    e.drv.call("init", expect="Success", env=dict(e.env, FLEXVOL_DEBUG="1"))
    with open(e.log) as f:
        log = f.read()
    check(" op=init " in log, log)


@case
def empty_image_is_not_bound(e):
    """An image under one sector is refused with a message and nothing bound (issue 11:
    a device of no capacity is not in /proc/partitions, where bindings are looked up)."""
    for size in (0, 511):
        with open(e.image(), "wb") as f:
            f.truncate(size)
        r = e.k.waitforattach("loop:vol1.img", e.opts(size=None), expect="Failure")
        check("smaller than one 512-byte sector" in r["message"], r["message"])
        e.nothing_left("empty image")
    with open(e.image(), "wb") as f:
        f.truncate(512)
    r = e.k.waitforattach("loop:vol1.img", e.opts(size=None), expect="Success")
    check(r["device"] in e.loops(), "one sector is bound: %r" % r)
    again = e.k.waitforattach("loop:vol1.img", e.opts(size=None), expect="Success")
    check(again["device"] == r["device"], "found again, not bound twice: %r" % again)
    e.k.detach("pv1", expect="Success")
    e.nothing_left("one-sector image")


@case
def detach_for_another_node_takes_no_lock(e):
    """detach for another node touches nothing here: no lock to wait for (issue 11)."""
    locks = os.path.join(e.run, "locks")
    os.makedirs(locks)
    fd = os.open(os.path.join(locks, "loop-vol-pv1.lock"), os.O_RDONLY | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        env = dict(e.env, FLEXVOL_LOCK_TIMEOUT="1")
        e.drv.call("detach", "pv1", "othernode", expect="Success", env=env)
        r = e.drv.call("detach", "pv1", e.node, expect="Failure", env=env)
        check("lock" in r["message"], r["message"])
    finally:
        os.close(fd)
    e.drv.call("detach", "pv1", e.node, expect="Success")


@case
def argument_counts(e):
    """§8: argument-count errors -> a JSON Failure (not usage text), for every op."""
    o = e.opts()
    wrong = {
        "attach": [[o], [o, "n", "x"]], "isattached": [[o], []], "detach": [["pv1"], []],
        "waitforattach": [[o], ["/dev/loop0", o, "x"]], "mountdevice": [["/a", o], []],
        "unmountdevice": [[], ["/a", "b"]], "mount": [["/a"], ["/a", o, "x"]],
        "unmount": [[], ["/a", "b"]], "expandfs": [[o, "", "/a", "1"]],
    }
    for op, variants in wrong.items():
        for args in variants:
            r = e.drv.call(op, *args, expect="Failure")
            check("argument" in r["message"], "%s %d args: %s" % (op, len(args), r["message"]))
    e.nothing_left("argument counts")


@case
def full_lifecycle_each_call_twice(e):
    """§4.1, ADC on: KCM init/attach, kubelet waitforattach/mountdevice/mount; teardown;
    every call twice in a row succeeds."""
    k = e.k
    o = e.opts()
    vol = "pv1"
    k.init(expect="Success")
    k.drv.call("getvolumename", o, expect="Not supported")
    a1, a2 = twice(k.attach, o, expect="Success")
    check(a1["device"] == a2["device"], "attach handle is deterministic")
    check(not e.loops(), "attach has no node-local side effects")
    # the logical attach (attach succeeded, no detach yet) is what isattached reports: before
    # waitforattach too, else the ADC would mark the volume detached and attach it again
    check(k.isattached(o, expect="Success")["attached"] is True, "attached before waitforattach")
    w1, w2 = twice(k.waitforattach, a1["device"], o, expect="Success")
    check(w1["device"] == w2["device"], "one device: %r %r" % (w1, w2))
    dev = w1["device"]
    check(list(e.loops()) == [dev], "exactly one binding: %r" % e.loops())
    check(os.path.getsize(e.image()) == 64 << 20, "sparse image of the requested size")
    check(k.isattached(o, expect="Success")["attached"] is True, "attached after waitforattach")
    check(k.isattached(o, node="some-other-node", expect="Success")["attached"] is True,
          "another node: the logical attach stands")
    twice(k.mountdevice, vol, dev, o, expect="Success")
    m = mounted_at(k.gmp(vol))
    check(len(m) == 1 and m[0][1] == dev and m[0][2] == "ext4", "global mount: %r" % m)
    twice(k.mount, "pod-a", vol, o, expect="Success")
    pd = k.poddir("pod-a", vol)
    check(len(mounted_at(pd)) == 1, "one bind mount in the pod dir")
    with open(os.path.join(pd, "hello"), "w") as f:
        f.write("data")
    twice(k.unmount, "pod-a", vol, expect="Success")
    check(os.path.isdir(pd) and not os.listdir(pd), "pod dir left empty (§7.11)")
    check(not mounted_at(pd), "pod dir unmounted")
    twice(k.unmountdevice, vol, expect="Success")
    check(not mounted_at(k.gmp(vol)), "global path unmounted")
    check(not e.loops(), "unmountdevice released the loop device")
    twice(k.detach, vol, expect="Success")
    e.nothing_left("lifecycle")


@case
def undo_of_never_created_volume(e):
    """Rule 12: undoing something absent is Success."""
    k = e.k
    k.unmount("pod-x", "ghost", expect="Success")
    k.unmountdevice("ghost", expect="Success")
    k.detach("ghost", expect="Success")
    os.makedirs(k.poddir("pod-y", "ghost"))
    k.unmount("pod-y", "ghost", expect="Success")
    e.nothing_left("undo")


@case
def data_kept_across_detach_and_attach(e):
    k = e.k
    dev = bring_up(e)
    with open(os.path.join(k.poddir("pod-a", "pv1"), "keep.txt"), "w") as f:
        f.write("kept across detach")
    tear_down(e)
    e.nothing_left("after first teardown")
    dev2 = bring_up(e, uids=("pod-b",))
    with open(os.path.join(k.poddir("pod-b", "pv1"), "keep.txt")) as f:
        check(f.read() == "kept across detach", "data survives")
    tear_down(e, uids=("pod-b",))
    e.nothing_left("after second teardown")
    del dev, dev2


@case
def read_only(e):
    """kubernetes.io/readwrite=ro: the device mount and the pod's bind read-only, writes fail with
    EROFS.  The loop device itself is read-write when the image can be written: read-only is the
    pod's bind's (issue 17 point 8, docs/design.md)."""
    k = e.k
    bring_up(e)
    with open(os.path.join(k.poddir("pod-a", "pv1"), "ro.txt"), "w") as f:
        f.write("written rw")
    tear_down(e)
    o = e.opts(ro=True)
    dev = bring_up(e, opts=o, uids=("pod-r",))
    check(not loop_ro(dev), "the loop device is read-write: another pod may want to write")
    check("ro" in mounted_at(k.gmp("pv1"))[0][3].split(","), "device mount is ro: %r"
          % mounted_at(k.gmp("pv1")))
    pd = k.poddir("pod-r", "pv1")
    check("ro" in mounted_at(pd)[0][3].split(","), "pod mount is ro: %r" % mounted_at(pd))
    with open(os.path.join(pd, "ro.txt")) as f:
        check(f.read() == "written rw", "data readable")
    try:
        open(os.path.join(pd, "new"), "w").close()
        raise Fail("write on a read-only volume succeeded")
    except OSError as err:
        check(err.errno == 30, "EROFS expected, got %r" % err)
    tear_down(e, uids=("pod-r",))
    e.nothing_left("read-only")


@case
def read_only_blank_volume_is_refused(e):
    k = e.k
    o = e.opts(ro=True)
    # a read-only use cannot create the image, and a blank one has nothing to mount
    r = k.waitforattach("loop:vol1.img", o, expect="Failure")
    check("open" in r["message"] or "exist" in r["message"], r["message"])
    open(e.image(), "wb").truncate(64 << 20)
    dev = k.waitforattach("loop:vol1.img", o, expect="Success")["device"]
    r = k.mountdevice("pv1", dev, o, expect="Failure")
    check("blank" in r["message"], r["message"])
    k.unmountdevice("pv1", expect="Success")
    k.detach("pv1", expect="Success")
    e.nothing_left("ro blank")


@case
def eight_pods_in_parallel(e):
    """§1.1: unmount for different pods always runs in parallel; mount may, too."""
    k = e.k
    o = e.opts()
    bring_up(e, uids=())
    uids = ["pod-%d" % i for i in range(8)]
    _, errors = in_parallel([lambda u=u: k.mount(u, "pv1", o, expect="Success") for u in uids])
    check(not errors, "parallel mounts: %r" % errors)
    for u in uids:
        check(len(mounted_at(k.poddir(u, "pv1"))) == 1, "%s mounted once" % u)
    with open(os.path.join(k.poddir(uids[0], "pv1"), "shared"), "w") as f:
        f.write("one")
    with open(os.path.join(k.poddir(uids[7], "pv1"), "shared")) as f:
        check(f.read() == "one", "all pods see one filesystem")
    _, errors = in_parallel([lambda u=u: k.unmount(u, "pv1", expect="Success") for u in uids])
    check(not errors, "parallel unmounts: %r" % errors)
    for u in uids:
        check(not mounted_at(k.poddir(u, "pv1")) and not os.listdir(k.poddir(u, "pv1")),
              "%s empty" % u)
    k.unmountdevice("pv1", expect="Success")
    k.detach("pv1", expect="Success")
    e.nothing_left("parallel")


@case
def parallel_waitforattach_one_binding(e):
    """Races between two kubelet retries for one volume still end with one binding."""
    k = e.k
    o = e.opts()
    out, errors = in_parallel([lambda: k.waitforattach("loop:vol1.img", o, expect="Success")] * 4)
    check(not errors, "parallel waitforattach: %r" % errors)
    devs = {r["device"] for r in out}
    check(len(out) == 4 and len(devs) == 1, "one device for all: %r" % out)
    check(list(e.loops()) == list(devs), "one binding: %r" % e.loops())
    k.detach("pv1", expect="Success")
    e.nothing_left("parallel waitforattach")


@case
def two_volumes_one_image_conflict(e):
    k = e.k
    dev = k.waitforattach("loop:vol1.img", e.opts("pv1"), expect="Success")["device"]
    r = k.waitforattach("loop:vol1.img", e.opts("pv2"), expect="Failure")
    check("another volume" in r["message"] and dev in r["message"], r["message"])
    check(len(e.loops()) == 1, "no second binding")
    k.detach("pv2", expect="Success")
    check(len(e.loops()) == 1, "detach of pv2 leaves pv1's binding")
    k.detach("pv1", expect="Success")
    e.nothing_left("conflict")


def bad(e, opts, words, op="all"):
    """A bad option is a Failure with a message naming the problem, on every op that reads options,
    and nothing is bound, mounted or created."""
    k = e.k
    before = set(os.listdir(e.root))
    calls = [("attach", lambda: k.attach(opts, expect="Failure")),
             ("waitforattach", lambda: k.waitforattach("loop:x", opts, expect="Failure")),
             ("mountdevice", lambda: k.mountdevice("pv1", "/dev/loop0", opts, expect="Failure")),
             ("mount", lambda: k.mount("pod-a", "pv1", opts, expect="Failure")),
             ("isattached", lambda: k.isattached(opts, expect="Failure"))]
    for name, c in calls:
        if op != "all" and name not in op:
            continue
        r = c()
        check(any(w in r["message"] for w in words), "%s: message %r lacks %r" % (name, r["message"], words))
    check(set(os.listdir(e.root)) == before, "nothing created in the loop root")
    e.nothing_left("bad input")


@case
def bad_path_dotdot(e):
    bad(e, e.opts(file="../escape.img"), ["inside the loop root"])
    bad(e, e.opts(file="sub/../../escape.img"), ["inside the loop root"])
    check(not os.path.exists(os.path.join(e.dir, "escape.img")), "no file outside the root")


@case
def bad_path_absolute_outside(e):
    bad(e, e.opts(file="/etc/passwd"), ["inside the loop root"])
    bad(e, e.opts(file=e.root + "X/vol.img"), ["inside the loop root"])
    bad(e, e.opts(file=e.root), ["inside the loop root"])


@case
def absolute_inside_root_is_fine(e):
    k = e.k
    o = e.opts(file=os.path.join(e.root, "abs.img"))
    r = k.attach(o, expect="Success")
    check(r["device"] == "loop:abs.img", r)
    dev = k.waitforattach(r["device"], o, expect="Success")["device"]
    check(e.loops() == {dev: os.path.join(e.root, "abs.img")}, e.loops())
    k.detach("pv1", expect="Success")
    e.nothing_left("abs")


@case
def bad_path_symlink_escape(e):
    """A symlink inside the root that points out of it is refused on the node (openat2: no symlinks)."""
    target = os.path.join(e.dir, "outside.img")
    with open(target, "wb") as f:
        f.truncate(64 << 20)
    os.symlink(target, os.path.join(e.root, "link.img"))
    os.symlink("..", os.path.join(e.root, "up"))
    for f in ("link.img", "up/outside.img"):
        o = e.opts(file=f)
        r = e.k.waitforattach("loop:" + f, o, expect="Failure")
        check("passes through a symlink" in r["message"], r["message"])
        r = e.k.mountdevice("pv1", "", o, expect="Failure")
        check("passes through a symlink" in r["message"], r["message"])
    e.nothing_left("symlink")


@case
def bad_missing_file_option(e):
    o = e.k.options("pv1", {"size": "64Mi"}, fstype="ext4")
    bad(e, o, ["'file' is required"])
    bad(e, e.k.options("pv1", {"file": ""}), ["'file' is required"])


@case
def missing_image_without_size(e):
    o = e.opts(size=None)
    e.k.attach(o, expect="Success")  # attach cannot know: it never touches the node
    r = e.k.waitforattach("loop:vol1.img", o, expect="Failure")
    check("does not exist" in r["message"] and "size" in r["message"], r["message"])
    e.nothing_left("no size")


@case
def bad_size(e):
    for s in ("64 Mi", "64MB", "-64Mi", "abc", "1.5", "0", "100", "64Mi;rm", "99999999Ei", "1e400"):
        bad(e, e.opts(size=s), ["option 'size'"])


@case
def bad_preallocate(e):
    """preallocate (the provisioner's, for its node agent) is one of the driver's options: true
    or false, anything else a Failure naming it; a valid one changes nothing of the op"""
    for v in ("yes", "1", "TRUE", "true;x"):
        bad(e, e.opts(extra={"preallocate": v}), ["option 'preallocate' must be true or false"])
    e.k.attach(e.opts(extra={"preallocate": "true"}), expect="Success")


@case
def bad_fstype_injection(e):
    for fs in ("ext4 -O ^has_journal", "ext4;reboot", "../../bin/sh", "btrfsx", "vfat", "ext4,nodev"):
        bad(e, e.opts(fstype=fs), ["fsType"])


@case
def bad_json(e):
    k = e.k
    for j in ('{"file":"vol1.img"', '{"file":"vol1.img"}x', '{}{}', '[]', '"str"', "", "{'file':'a'}",
              '{"file":"a",}', "\xff"):
        for call in (lambda: k.attach(j, expect="Failure"),
                     lambda: k.waitforattach("loop:x", j, expect="Failure"),
                     lambda: k.mountdevice("pv1", "/dev/loop0", j, expect="Failure"),
                     lambda: k.mount("pod-a", "pv1", j, expect="Failure")):
            r = call()
            check("JSON" in r["message"] or "options" in r["message"], r["message"])
    r = k.attach('{"file":5,"kubernetes.io/pvOrVolumeName":"pv1"}', expect="Failure")
    check("'file' must be a string" in r["message"], r["message"])
    r = k.attach(go_json({"file": "a.img", "kubernetes.io/readwrite": "maybe"}), expect="Failure")
    check("readwrite" in r["message"], r["message"])
    e.nothing_left("bad json")


@case
def bad_nul_in_values(e):
    """A value is exactly what the JSON says: a NUL (\\u0000) is refused for every key, not
    read as the text before it (issue 9 item 5)."""
    with open(e.image("ok.img"), "wb") as f:
        f.truncate(64 << 20)
    bad(e, e.opts(file="ok.img\u0000../../etc/passwd", size=None), ["NUL"])
    bad(e, e.opts(fstype="ext4\u0000x"), ["NUL"])
    bad(e, e.opts(extra={"unknown-key": "x\u0000"}), ["NUL"])
    bad(e, e.opts(extra={"x\u0000y": "1"}), ["NUL"])


@case
def replies_and_log_are_utf8(e):
    """Arguments quoted in a message with invalid UTF-8 bytes or control characters: the reply
    (checked by flexsim: decodes as UTF-8, one JSON document) and the log stay valid UTF-8."""
    k = e.k
    r = e.drv.call("unmount", "rel\udcff\x01dir", expect="Failure")
    check("rel\ufffd" in r["message"], r["message"])
    r = e.drv.call("mount", "/nonexistent-\udcfe\udcff/x", e.opts(), expect="Failure")
    bad_rw = json.loads(e.opts())
    bad_rw["kubernetes.io/readwrite"] = "\u00e9\u0001\n"
    r = k.attach(json.dumps(bad_rw), expect="Failure")
    check("\u00e9" in r["message"], r["message"])
    with open(e.log, "rb") as f:
        text = f.read()
    text.decode("utf-8")  # raises on invalid UTF-8
    for line in text.split(b"\n")[:-1]:
        check(all(c >= 0x20 for c in line), "control character in a log line: %r" % line)
    e.nothing_left("utf8")


@case
def json_go_style_and_unicode(e):
    """Go escapes & < > as \\u0026 \\u003c \\u003e; keys come sorted, but any order must work;
    unknown keys (of any type) are ignored."""
    k = e.k
    name = "d\u00e9j\u00e0 & <vu>.img"
    o = e.opts(file=name, extra={"zzz-unknown": "x", "aaa": "1"})
    check("\\u0026" in o and "\\u003c" in o, o)
    dev = k.waitforattach("loop:x", o, expect="Success")["device"]
    check(e.loops() == {dev: e.image(name)}, e.loops())
    # keys in another order, an unknown non-string key, whitespace
    doc = json.loads(o)
    shuffled = "{ " + ", ".join("%s: %s" % (json.dumps(kk), json.dumps(doc[kk])) for kk in reversed(sorted(doc)))
    shuffled += ', "x-extra": {"nested": [1, 2]} }'
    r = k.waitforattach("loop:x", shuffled, expect="Success")
    check(r["device"] == dev, r)
    k.detach("pv1", expect="Success")
    e.nothing_left("unicode")


@case
def user_options_override_kubernetes_keys(e):
    """§2: user options come last and win; an override of pvOrVolumeName names another volume."""
    k = e.k
    o = k.options("pv1", {"file": "vol1.img", "size": "64Mi", "kubernetes.io/pvOrVolumeName": "other"})
    dev = k.waitforattach("loop:vol1.img", o, expect="Success")["device"]
    k.detach("pv1", expect="Success")
    check(dev in e.loops(), "detach of pv1 does not touch the binding made for 'other'")
    k.detach("other", expect="Success")
    e.nothing_left("override")


@case
def identity_options_cannot_steer_teardown(e):
    """Issue 10: pv2's options claim to be pv1 (user options override pvOrVolumeName); pv1's
    teardown must still release pv1 only, and pv2 keeps working."""
    k = e.k
    o1 = e.opts("pv1")
    o2 = k.options("pv2", {"file": "vol2.img", "size": "64Mi", "kubernetes.io/pvOrVolumeName": "pv1"},
                   fstype="ext4")
    d1 = bring_up(e, "pv1", o1)
    d2 = bring_up(e, "pv2", o2, uids=("pod-b",))
    check(d1 != d2 and len(e.loops()) == 2, "two bindings: %r" % e.loops())
    tear_down(e, "pv1")
    check(list(e.loops()) == [d2], "pv1's teardown left pv2's binding alone: %r" % e.loops())
    check(len(mounted_at(k.poddir("pod-b", "pv2"))) == 1, "pv2 still mounted")
    tear_down(e, "pv2", uids=("pod-b",))
    e.nothing_left("identity")


@case
def identity_options_cannot_reach_another_volume(e):
    """Options naming another PV's image get neither its mount, its filesystem nor its growth."""
    k = e.k
    d1 = bring_up(e, "pv1", e.opts("pv1"))
    with open(os.path.join(k.poddir("pod-a", "pv1"), "secret.txt"), "w") as f:
        f.write("pv1's data")
    # pv2's mountdevice with options naming pv1's image (and pretending to be pv1)
    evil = k.options("pv2", {"file": "vol1.img", "kubernetes.io/pvOrVolumeName": "pv1"}, fstype="ext4")
    r = k.mountdevice("pv2", d1, evil, expect="Failure")
    check("another volume" in r["message"], r["message"])
    check(not mounted_at(k.gmp("pv2")), "pv2's global path got pv1's filesystem")
    # pv2's pod with options naming pv1's image: the pod dir names the volume
    r = k.mount("pod-x", "pv2", evil, expect="Failure")
    check(not mounted_at(k.poddir("pod-x", "pv2")), "pv2's pod got pv1's filesystem")
    # expandfs through pv2's pod dir with options naming pv1's image
    d2 = bring_up(e, "pv2", e.opts("pv2", file="vol2.img"), uids=("pod-b",))
    size = os.path.getsize(e.image())
    r = k.expandfs(evil, d2, "pod-b", "pv2", 128 << 20, 64 << 20, expect="Failure")
    check(os.path.getsize(e.image()) == size, "pv1's image grew through pv2's pod")
    tear_down(e, "pv2", uids=("pod-b",))
    tear_down(e, "pv1")
    e.nothing_left("identity reach")


@case
def existing_filesystem_and_fstype_mismatch(e):
    k = e.k
    with open(e.image(), "wb") as f:
        f.truncate(320 << 20)
    subprocess.run(["mkfs.xfs", "-q", e.image()], check=True)
    o = e.opts(size=None, fstype="ext4")
    dev = k.waitforattach("loop:vol1.img", o, expect="Success")["device"]
    r = k.mountdevice("pv1", dev, o, expect="Failure")
    check("holds xfs" in r["message"] and "refusing" in r["message"], r["message"])
    check(not mounted_at(k.gmp("pv1")), "nothing mounted")
    # fsType "" keeps what is there (kubelet passes "" when the PV says nothing)
    o2 = e.opts(size=None, fstype="")
    k.mountdevice("pv1", dev, o2, expect="Success")
    check(mounted_at(k.gmp("pv1"))[0][2] == "xfs", mounted_at(k.gmp("pv1")))
    k.unmountdevice("pv1", expect="Success")
    k.detach("pv1", expect="Success")
    e.nothing_left("mismatch")


@case
def mountdevice_again_other_fstype_or_mode(e):
    """An already mounted global path answers Success only for the same filesystem (issue 9
    item 8); another fsType is refused, as on a first mount.  The mode is the pods' binds'
    (issue 17 point 8): ro on a read-write device mount is Success and changes nothing, rw on
    a read-only one makes it read-write."""
    k = e.k
    o = e.opts()
    dev = k.waitforattach("loop:vol1.img", o, expect="Success")["device"]
    k.mountdevice("pv1", dev, o, expect="Success")
    r = k.mountdevice("pv1", dev, e.opts(fstype="xfs"), expect="Failure")
    check("mounted as ext4" in r["message"] and "xfs" in r["message"], r["message"])
    k.mountdevice("pv1", dev, e.opts(ro=True), expect="Success")
    gm = mounted_at(k.gmp("pv1"))
    check(len(gm) == 1 and gm[0][2] == "ext4" and "rw" in gm[0][3].split(","), "changed: %r" % gm)
    subprocess.run(["mount", "-o", "remount,ro", k.gmp("pv1")], check=True)
    k.mountdevice("pv1", dev, o, expect="Success")
    gm = mounted_at(k.gmp("pv1"))
    check(len(gm) == 1 and "rw" in gm[0][3].split(","), "made read-write: %r" % gm)
    k.mountdevice("pv1", dev, o, expect="Success")
    k.mountdevice("pv1", dev, e.opts(fstype=""), expect="Success")
    k.unmountdevice("pv1", expect="Success")
    k.detach("pv1", expect="Success")
    e.nothing_left("mountdevice again")


@case
def partitioned_image_is_not_formatted(e):
    k = e.k
    with open(e.image(), "wb") as f:
        f.truncate(64 << 20)
    subprocess.run(["sfdisk", "-q", e.image()], input=b"label: gpt\n,,L\n", check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(e.image(), "rb") as f:
        before = f.read(1 << 20)
    o = e.opts(size=None)
    dev = k.waitforattach("loop:vol1.img", o, expect="Success")["device"]
    r = k.mountdevice("pv1", dev, o, expect="Failure")
    check("partition table" in r["message"], r["message"])
    with open(e.image(), "rb") as f:
        check(f.read(1 << 20) == before, "the image was not touched")
    k.detach("pv1", expect="Success")
    e.nothing_left("partitioned")


def refused_untouched(e, what, write):
    """An image blank but for what @write puts in it: mountdevice refuses to format it, names
    @what, and leaves every byte as it was."""
    k = e.k
    with open(e.image(), "wb") as f:
        f.truncate(64 << 20)
    with open(e.image(), "r+b") as f:
        write(f)
    with open(e.image(), "rb") as f:
        before = f.read()
    o = e.opts(size=None)
    dev = k.waitforattach("loop:vol1.img", o, expect="Success")["device"]
    r = k.mountdevice("pv1", dev, o, expect="Failure")
    check(what in r["message"] and "refusing" in r["message"], r["message"])
    check(not mounted_at(k.gmp("pv1")), "nothing mounted")
    k.detach("pv1", expect="Success")
    with open(e.image(), "rb") as f:
        check(f.read() == before, "the image was not touched")
    e.nothing_left("refused: " + what)


@case
def zfs_labels_at_the_end_only_are_not_blank(e):
    """Issue 29: the blank check reads ZFS labels in small pieces (libblkid's prober reads them
    in 256 KiB ones) and still looks at the device's end: uberblocks in the last label alone,
    four of them (what libblkid wants) or only one (stricter), keep the image from mkfs."""
    size = 64 << 20

    def last_label(n):
        def write(f):
            for i in range(n):  # the last label's uberblock area: its second 128 KiB, 1 KiB each
                f.seek(size - (128 << 10) + i * 1024)
                f.write(struct.pack("<Q", 0x00bab10c))
        return write
    refused_untouched(e, "zfs_member", last_label(4))
    refused_untouched(e, "zfs_member", last_label(1))


@case
def xfs_external_log_is_not_blank(e):
    """Issue 29: an XFS log record header in the first 256 KiB (libblkid's xfs_external_log,
    now read in small pieces) keeps the image from mkfs."""
    def write(f):
        f.seek(40 * 512)
        # h_magicno, h_cycle, h_version 2, h_len 512, then h_fmt (little-endian Linux) at 300
        f.write(struct.pack(">IIII", 0xfeedbabe, 1, 2, 512))
        f.seek(40 * 512 + 300)
        f.write(struct.pack(">I", 1))
    refused_untouched(e, "xfs_external_log", write)


@case
def xfs_volume_and_online_expand(e):
    """expandfs <json> <devicePath> <podVolumeDir> <new> <old> (§1.5): file, loop capacity, filesystem."""
    k = e.k
    o = e.opts(size="320Mi", fstype="xfs")
    dev = bring_up(e, opts=o)
    pd = k.poddir("pod-a", "pv1")
    before = os.statvfs(pd)
    new = 512 << 20
    k.expandfs(o, dev, "pod-a", "pv1", new, 320 << 20, expect="Success")
    check(os.path.getsize(e.image()) == new, "image grown")
    with open("/sys/block/%s/size" % os.path.basename(dev)) as f:
        check(int(f.read()) * 512 == new, "loop capacity refreshed")
    after = os.statvfs(pd)
    check(after.f_blocks * after.f_frsize > before.f_blocks * before.f_frsize + (150 << 20),
          "filesystem grown: %d -> %d" % (before.f_blocks * before.f_frsize, after.f_blocks * after.f_frsize))
    k.expandfs(o, dev, "pod-a", "pv1", new, 320 << 20, expect="Success")  # twice
    k.expandfs(o, "", "pod-a", "pv1", new, new, expect="Success")  # devicePath may be ""
    tear_down(e)
    e.nothing_left("xfs expand")


@case
def xfs_grown_while_detached_grows_at_mountdevice(e):
    """A device larger than its filesystem (an image grown while detached; a restore into a larger
    volume) gets the filesystem grown at mountdevice, and a mountdevice repeated over a mounted,
    still short filesystem (what a grow killed half-way leaves) grows it then."""
    k = e.k
    o = e.opts(size="320Mi", fstype="xfs")
    dev = bring_up(e, opts=o)
    small = os.statvfs(k.gmp("pv1")).f_blocks * os.statvfs(k.gmp("pv1")).f_frsize
    tear_down(e)
    os.truncate(e.image(), 512 << 20)
    dev = bring_up(e, opts=o)
    st = os.statvfs(k.gmp("pv1"))
    check(st.f_blocks * st.f_frsize > small + (150 << 20),
          "grown at mountdevice: %d -> %d" % (small, st.f_blocks * st.f_frsize))
    # the device grows under the mount (LOOP_SET_CAPACITY), as a killed grow would leave it
    os.truncate(e.image(), 640 << 20)
    fd = os.open(dev, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, 0x4C07)  # LOOP_SET_CAPACITY
    finally:
        os.close(fd)
    k.mountdevice("pv1", dev, o, expect="Success")
    st2 = os.statvfs(k.gmp("pv1"))
    check(st2.f_blocks * st2.f_frsize > st.f_blocks * st.f_frsize + (100 << 20),
          "grown by the repeated mountdevice: %d -> %d" % (st.f_blocks * st.f_frsize, st2.f_blocks * st2.f_frsize))
    with open(e.log) as f:
        check(f.read().count("growing it") == 2, "two grows logged")
    tear_down(e)
    e.nothing_left("xfs grown while detached")


def has_cap(n):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> n & 1)
    return False


@case
def ext4_expand(e):
    """ext4 online growth needs CAP_SYS_RESOURCE (EXT4_IOC_RESIZE_FS).  Without it (some sandboxes)
    the file and device still grow and the reply explains the refusal; the VM lane covers the rest."""
    k = e.k
    o = e.opts()
    dev = bring_up(e, opts=o)
    new = 128 << 20
    if has_cap(24):
        k.expandfs(o, dev, "pod-a", "pv1", new, 64 << 20, expect="Success")
        st = os.statvfs(k.poddir("pod-a", "pv1"))
        check(st.f_blocks * st.f_frsize > 100 << 20, "ext4 grown")
    else:
        r = k.expandfs(o, dev, "pod-a", "pv1", new, 64 << 20, expect="Failure")
        check("resize2fs" in r["message"] and "Permission denied" in r["message"], r["message"])
    check(os.path.getsize(e.image()) == new, "image grown")
    tear_down(e)
    e.nothing_left("ext4 expand")


@case
def expand_bad_sizes(e):
    o = e.opts()
    for new, old in (("abc", "1"), ("-5", "1"), ("0", "0"), ("1000", "x"), ("513", "1")):
        r = e.drv.call("expandfs", o, "", e.k.poddir("p", "pv1"), new, old, expect="Failure")
        check("size" in r["message"], r["message"])
    r = e.k.expandfs(o, "", "p", "pv1", 128 << 20, 64 << 20, expect="Failure")
    check("not attached" in r["message"] or "does not exist" in r["message"] or "open" in r["message"],
          r["message"])
    e.nothing_left("expand bad")


@case
def teardown_with_state_wiped(e):
    """kubelet restart: unmount/unmountdevice/detach carry no JSON; the kernel alone tells what to undo."""
    k = e.k
    bring_up(e)
    shutil.rmtree(e.state)
    tear_down(e)
    e.nothing_left("state wiped after mount")
    # and when only waitforattach ran before the wipe, detach still finds the binding (tag)
    k.waitforattach("loop:vol1.img", e.opts(), expect="Success")
    shutil.rmtree(e.state)
    k.detach("pv1", expect="Success")
    e.nothing_left("state wiped after waitforattach")


@case
def sigkill_during_waitforattach(e):
    """Killed at any moment, a retry ends with exactly one binding."""
    k = e.k
    o = e.opts()
    for delay_ms in (0, 1, 2, 3, 5, 8, 12, 20, 40):
        p = k.drv.spawn("waitforattach", "loop:vol1.img", o)
        time.sleep(delay_ms / 1000)
        p.send_signal(signal.SIGKILL)
        p.communicate()
        r = k.waitforattach("loop:vol1.img", o, expect="Success")
        check(list(e.loops()) == [r["device"]], "after kill at %d ms: %r" % (delay_ms, e.loops()))
        k.detach("pv1", expect="Success")
        check(not e.loops(), "detached")
    e.nothing_left("kill waitforattach")


# --- SIGKILL during mkfs: kubelet's real retry ----------------------------------

class MkfsGate:
    """A mkfs wrapper for timing only: every invocation records its pid, notes
    whether an earlier one is still alive (two writers on one device), then
    waits at a gate (a FIFO the test opens) before it becomes the real mkfs.
    @fork: the wrapper runs that part in a background child and waits for it,
    like a helper that forks: the child is what a parent-death signal misses,
    so only the device lock it inherited can hold the retry back."""

    def __init__(self, e, fstype="ext4", fork=False):
        self.dir = os.path.join(e.dir, "mkfs-gate")
        os.makedirs(self.dir)
        self.gate = os.path.join(self.dir, "gate")
        self.pids = os.path.join(self.dir, "pids")
        self.overlaps = os.path.join(self.dir, "overlaps")
        os.mkfifo(self.gate)
        inner = os.path.join(self.dir, "mkfs-inner")
        with open(inner, "w") as f:
            f.write("#!/bin/sh\n"
                    "for p in $(cat %(pids)s 2>/dev/null); do\n"
                    "  s=$(cut -d')' -f2 /proc/$p/stat 2>/dev/null | cut -c2)\n"
                    "  [ -n \"$s\" ] && [ \"$s\" != Z ] && echo \"$$ while $p\" >> %(ov)s\n"
                    "done\n"
                    "echo $$ >> %(pids)s\n"
                    "read x < %(gate)s\n"
                    "exec /sbin/mkfs.%(fs)s \"$@\"\n"
                    % {"pids": self.pids, "ov": self.overlaps, "gate": self.gate, "fs": fstype})
        os.chmod(inner, 0o755)
        self.path = os.path.join(self.dir, "bin")
        os.makedirs(self.path)
        with open(os.path.join(self.path, "mkfs." + fstype), "w") as f:
            if fork:
                f.write("#!/bin/sh\n%s \"$@\" &\nwait $!\n" % inner)
            else:
                f.write("#!/bin/sh\nexec %s \"$@\"\n" % inner)
        os.chmod(os.path.join(self.path, "mkfs." + fstype), 0o755)
        self.env = dict(e.env, FLEXVOL_HELPER_PATH=self.path + ":/usr/sbin:/usr/bin:/sbin:/bin")

    def started(self):
        try:
            with open(self.pids) as f:
                return [int(x) for x in f.read().split()]
        except FileNotFoundError:
            return []

    def overlapped(self):
        try:
            with open(self.overlaps) as f:
                return f.read().split("\n")[:-1]
        except FileNotFoundError:
            return []

    def wait_for(self, cond, what, limit=60):
        deadline = time.monotonic() + limit  # a bound for a broken run, not a timing assert
        while not cond():
            if time.monotonic() > deadline:
                raise Fail("waited %d s for %s" % (limit, what))
            time.sleep(0.005)

    def open_until(self, p):
        """Let every wrapper at the gate go on, until call @p has ended."""
        deadline = time.monotonic() + 120
        while p.poll() is None and time.monotonic() < deadline:
            try:
                g = os.open(self.gate, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                time.sleep(0.005)  # no reader at the gate now
                continue
            os.write(g, b"go\n")
            os.close(g)
            time.sleep(0.005)


def flock_waiter(pid):
    """Is @pid blocked in flock() (a "->" line of /proc/locks)?"""
    with open("/proc/locks") as f:
        return any("->" in ln and " FLOCK " in ln and (" %d " % pid) in ln for ln in f)


def live_mkfs_under(d):
    """Processes still running a mkfs of ours (the gate's scripts or a real mkfs on our loops)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if d in cmd or ("mkfs" in cmd and "/dev/loop" in cmd):
            out.append((int(pid), cmd))
    return out


def kill_during_mkfs_then_retry(e, fork):
    """kubelet's retry: the driver is SIGKILLed while its mkfs runs, and the next
    mountdevice comes at once, while the old mkfs (if it lives on) still runs."""
    k = e.k
    g = MkfsGate(e, fork=fork)
    o = e.opts()
    dev = k.waitforattach("loop:vol1.img", o, expect="Success")["device"]
    os.makedirs(k.gmp("pv1"), exist_ok=True)
    drv = Driver(e.bin, g.env)
    p = drv.spawn("mountdevice", k.gmp("pv1"), dev, o)
    g.wait_for(lambda: len(g.started()) == 1 or p.poll() is not None, "the first mkfs")
    check(p.poll() is None, "the driver ended before its mkfs ran")
    p.kill()
    p.communicate()
    # the retry, at once: it must not probe or format while the old mkfs may write
    r = drv.spawn("mountdevice", k.gmp("pv1"), dev, o)
    g.wait_for(lambda: len(g.started()) == 2 or flock_waiter(r.pid) or r.poll() is not None,
               "the retry to run a mkfs, wait for the device lock or end")
    g.open_until(r)
    out, err = r.communicate()
    check(err == b"", "stderr: %r" % err)
    reply = json.loads(out)
    check(reply["status"] == "Success", "the retry: %r" % reply)
    check(not g.overlapped(), "a second mkfs started while the first still ran: %s"
          % g.overlapped())
    if fork:
        check(len(g.started()) == 1, "the retry waited for the orphan's filesystem and made "
              "none of its own: %d mkfs runs" % len(g.started()))
    m = mounted_at(k.gmp("pv1"))
    check(len(m) == 1 and m[0][1] == dev and m[0][2] == "ext4", "one ext4 mount: %r" % m)
    k.mountdevice("pv1", dev, o, expect="Success")
    check(len(mounted_at(k.gmp("pv1"))) == 1, "still one mount")
    check(list(e.loops()) == [dev], "one binding: %r" % e.loops())
    k.unmountdevice("pv1", expect="Success")
    k.detach("pv1", expect="Success")
    fsck = subprocess.run(["e2fsck", "-fn", e.image()], capture_output=True, text=True)
    check(fsck.returncode == 0, "e2fsck: %s%s" % (fsck.stdout, fsck.stderr))
    left = live_mkfs_under(e.dir)
    for pid, _ in left:
        os.kill(pid, signal.SIGKILL)
    check(not left, "mkfs left running: %r" % left)
    e.nothing_left("kill during mkfs")


@case
def sigkill_during_mkfs_immediate_retry(e):
    """The killed driver's mkfs dies with it (parent-death signal); the immediate
    retry formats once, after it: Success, one mount, a clean filesystem."""
    kill_during_mkfs_then_retry(e, fork=False)


@case
def sigkill_during_mkfs_retry_waits_for_orphan(e):
    """A mkfs that outlives the killed driver (a helper's own child) keeps the
    device lock it inherited; the immediate retry waits for it, never probes or
    formats under it, and mounts the filesystem it made."""
    kill_during_mkfs_then_retry(e, fork=True)


@case
def sigkill_at_any_point_of_real_mkfs(e):
    """The real mkfs (ext4 and xfs) killed with the driver at many points: what it
    leaves (blank, an unfinished xfs with sb_inprogress, a finished filesystem)
    always converges on the next call to one mount of a clean filesystem."""
    k = e.k
    for fs, size, check_cmd in (("ext4", "64Mi", ["e2fsck", "-fn"]),
                                ("xfs", "320Mi", ["xfs_repair", "-n"])):
        wrap = os.path.join(e.dir, "wrap-" + fs)
        os.makedirs(wrap)
        started = os.path.join(wrap, "started")
        with open(os.path.join(wrap, "mkfs." + fs), "w") as f:
            f.write("#!/bin/sh\n: > %s\nexec /sbin/mkfs.%s \"$@\"\n" % (started, fs))
        os.chmod(os.path.join(wrap, "mkfs." + fs), 0o755)
        drv = Driver(e.bin, dict(e.env, FLEXVOL_HELPER_PATH=wrap + ":/usr/sbin:/usr/bin:/sbin:/bin"))
        img = "%s.img" % fs
        o = e.opts(file=img, size=size, fstype=fs)
        for delay_ms in (0, 2, 4, 6, 8, 10, 13, 16, 20, 30):
            if os.path.exists(started):
                os.unlink(started)
            dev = k.waitforattach("loop:" + img, o, expect="Success")["device"]
            os.makedirs(k.gmp("pv1"), exist_ok=True)
            p = drv.spawn("mountdevice", k.gmp("pv1"), dev, o)
            deadline = time.monotonic() + 30
            while not os.path.exists(started) and p.poll() is None and time.monotonic() < deadline:
                time.sleep(0.0005)
            time.sleep(delay_ms / 1000)
            p.kill()
            p.communicate()
            k.mountdevice("pv1", dev, o, expect="Success")
            m = mounted_at(k.gmp("pv1"))
            check(len(m) == 1 and m[0][2] == fs, "%s, kill after %d ms: %r" % (fs, delay_ms, m))
            k.unmountdevice("pv1", expect="Success")
            k.detach("pv1", expect="Success")
            r = subprocess.run(check_cmd + [e.image(img)], capture_output=True, text=True)
            check(r.returncode == 0, "%s, kill after %d ms: %s %s" % (fs, delay_ms, r.stdout, r.stderr))
            os.truncate(e.image(img), 0)  # blank again for the next kill point
            os.unlink(e.image(img))
    e.nothing_left("kill at any point of mkfs")


@case
def unfinished_xfs_is_made_again(e):
    """An xfs whose mkfs was killed half-way (sb_inprogress set: blkid says xfs, the
    kernel refuses to mount it) holds no data: mountdevice makes it again."""
    k = e.k
    img = e.image("vol1.img")
    with open(img, "wb") as f:
        f.truncate(320 << 20)
    subprocess.run(["mkfs.xfs", "-q", img], check=True)
    with open(img, "r+b") as f:
        sb = bytearray(f.read(512))
        check(sb[:4] == b"XFSB" and sb[126] == 0, "a finished xfs")
        f.seek(126)
        f.write(b"\x01")  # what a mkfs.xfs killed before its last write leaves
    o = e.opts(size="320Mi", fstype="xfs")
    dev = k.waitforattach("loop:vol1.img", o, expect="Success")["device"]
    k.mountdevice("pv1", dev, o, expect="Success")
    m = mounted_at(k.gmp("pv1"))
    check(len(m) == 1 and m[0][2] == "xfs", "one xfs mount: %r" % m)
    k.unmountdevice("pv1", expect="Success")
    # a finished xfs with data is never made again
    k.mountdevice("pv1", dev, o, expect="Success")
    with open(os.path.join(k.gmp("pv1"), "data"), "w") as f:
        f.write("kept")
    k.unmountdevice("pv1", expect="Success")
    k.mountdevice("pv1", dev, o, expect="Success")
    check(os.path.exists(os.path.join(k.gmp("pv1"), "data")), "data kept")
    k.unmountdevice("pv1", expect="Success")
    # read-only: never formats, a clear Failure
    with open(img, "r+b") as f:
        f.seek(126)
        f.write(b"\x01")
    k.detach("pv1", expect="Success")
    ro = e.opts(size="320Mi", fstype="xfs", ro=True)
    dev = k.waitforattach("loop:vol1.img", ro, expect="Success")["device"]
    r = k.mountdevice("pv1", dev, ro, expect="Failure")
    check("unfinished" in r["message"], r["message"])
    k.unmountdevice("pv1", expect="Success")
    k.detach("pv1", expect="Success")
    e.nothing_left("unfinished xfs")


@case
def device_lock_deadline(e):
    """A device locked by someone else (a mkfs of another tool) is waited for only up
    to the lock timeout: a clear Failure, then Success once it is free."""
    k = e.k
    o = e.opts()
    dev = k.waitforattach("loop:vol1.img", o, expect="Success")["device"]
    fd = os.open(dev, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.makedirs(k.gmp("pv1"), exist_ok=True)
    r = k.drv.call("mountdevice", k.gmp("pv1"), dev, o, env=dict(e.env, FLEXVOL_LOCK_TIMEOUT="1"),
                   expect="Failure")
    check("locked" in r["message"] and dev in r["message"], r["message"])
    check(not mounted_at(k.gmp("pv1")), "nothing mounted")
    os.close(fd)
    k.mountdevice("pv1", dev, o, expect="Success")
    k.unmountdevice("pv1", expect="Success")
    k.detach("pv1", expect="Success")
    e.nothing_left("device lock")


@case
def helper_failure_reaches_message(e):
    """A failing helper's own words end up in the reply; stdout is still one document, stderr empty."""
    k = e.k
    o = e.opts(size="64Mi", fstype="xfs")  # mkfs.xfs refuses filesystems below 300 MB
    dev = k.waitforattach("loop:vol1.img", o, expect="Success")["device"]
    r = k.mountdevice("pv1", dev, o, expect="Failure")
    check("mkfs.xfs" in r["message"] and "300" in r["message"], r["message"])
    k.unmountdevice("pv1", expect="Success")
    k.detach("pv1", expect="Success")
    e.nothing_left("helper failure")


@case
def lock_timeout(e):
    """Per-volume flock with a deadline: a stuck holder yields a clear Failure, not a hang."""
    k = e.k
    locks = os.path.join(e.run, "locks")
    os.makedirs(locks)
    fd = os.open(os.path.join(locks, "loop-vol-pv1.lock"), os.O_RDONLY | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    env = dict(e.env, FLEXVOL_LOCK_TIMEOUT="1")
    t0 = time.monotonic()
    os.makedirs(k.gmp("pv1"))
    r = k.drv.call("mountdevice", k.gmp("pv1"), "", e.opts(), env=env, expect="Failure")
    check("lock" in r["message"] and time.monotonic() - t0 < 10, r["message"])
    os.close(fd)
    k.mountdevice("pv1", "", e.opts(), expect="Success")
    k.unmountdevice("pv1", expect="Success")
    k.detach("pv1", expect="Success")
    e.nothing_left("lock")


@case
def log_lines_and_no_secrets(e):
    """One summary line per call in the log; secrets passed to mount never reach it."""
    k = e.k
    secret = "s3cr3t-Pa55"
    bring_up(e, uids=())
    o = k.options("pv1", {"file": "vol1.img", "size": "64Mi"}, fstype="ext4", pod="pod-s",
                  secrets={"password": secret}, fsgroup=1000)
    k.mount("pod-s", "pv1", o, expect="Success")
    k.mount("pod-s", "pv1", '{"bad json', expect="Failure")
    tear_down(e, uids=("pod-s",))
    with open(e.log) as f:
        log = f.read()
    b64 = base64.b64encode(secret.encode()).decode()
    check(secret not in log and b64 not in log, "secret in the log")
    summaries = [ln for ln in log.splitlines() if " op=" in ln]
    # successful calls that change nothing here are not logged (README "Logging")
    logged = [c for c in k.drv.calls
              if c.status == "Failure" or c.argv[1] not in ("attach", "isattached")]
    check(len(summaries) == len(logged), "one summary per call that may change the node: "
          "%d lines, %d calls" % (len(summaries), len(logged)))
    check(len(logged) < len(k.drv.calls), "the KCM's successful attach is not logged")
    check(all("duration_ms=" in ln and "status=" in ln for ln in summaries), summaries[:3])
    e.nothing_left("log")


@case
def config_file_and_env(e):
    conf = os.path.join(e.dir, "flexvol.conf")
    with open(conf, "w") as f:
        f.write("# node config\nloop_root = %s\nlock_timeout = 30\n" % e.root)
    env = {k: v for k, v in e.env.items() if k != "FLEXVOL_LOOP_ROOT"}
    env["FLEXVOL_CONFIG"] = conf
    r = e.drv.call("waitforattach", "loop:x", e.opts(), env=env, expect="Success")
    check(r["device"] in e.loops(), "config file's loop_root used")
    e.k.detach("pv1", expect="Success")
    with open(conf, "a") as f:
        f.write("loop_rot = /tmp\n")
    r = e.drv.call("attach", e.opts(), e.node, env=env, expect="Failure")
    check("unknown key 'loop_rot'" in r["message"] and ":4" in r["message"], r["message"])
    env["FLEXVOL_CONFIG"] = os.path.join(e.dir, "missing.conf")
    r = e.drv.call("attach", e.opts(), e.node, env=env, expect="Failure")
    check("missing.conf" in r["message"], r["message"])
    e.drv.call("init", env=env, expect="Success")  # init never depends on the node's config
    e.nothing_left("config")


@case
def unknown_program_name(e):
    other = os.path.join(e.dir, "notadriver")
    shutil.copy(e.bin, other)
    r = Driver(other, e.env).call("init", expect="Failure")
    check("unknown driver 'notadriver'" in r["message"], r["message"])


@case
def no_helper_holds_the_pipe(e):
    """§7.2: combined-output readers wait for EOF; the whole lifecycle returns promptly."""
    t0 = time.monotonic()
    bring_up(e)
    tear_down(e)
    check(time.monotonic() - t0 < 60, "lifecycle took %.1f s" % (time.monotonic() - t0))
    check(all(c.elapsed < 30 for c in e.drv.calls), [(c.argv[1], c.elapsed) for c in e.drv.calls])
    e.nothing_left("pipe")


# --- hostile files in the loop root (issue 9 item 1) ------------------------

class OpenWatch:
    """inotify IN_OPEN on one path: did anything open() it?  (An O_PATH open is no open.)"""

    def __init__(self, path):
        import ctypes
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        check(self.fd >= 0, "inotify_init1")
        check(self.libc.inotify_add_watch(self.fd, path.encode(), 0x20) >= 0, "inotify_add_watch %s" % path)

    def opened(self):
        try:
            return len(os.read(self.fd, 4096)) > 0
        except BlockingIOError:
            return False

    def close(self):
        os.close(self.fd)


def plant(e, kind, name="vol1.img"):
    """A non-regular file where the image should be.  Returns its path."""
    import socket
    import stat as st
    p = e.image(name)
    if kind == "fifo":
        os.mkfifo(p, 0o600)
    elif kind == "chardev":  # /dev/null's numbers: opening it would be harmless, but it must not happen
        os.mknod(p, 0o600 | st.S_IFCHR, os.stat("/dev/null").st_rdev)
    elif kind == "blockdev":  # an existing loop device's numbers
        loops = sorted(d for d in os.listdir("/dev") if d.startswith("loop") and d[4:].isdigit())
        check(loops, "no /dev/loopN to copy the numbers of")
        os.mknod(p, 0o600 | st.S_IFBLK, os.stat("/dev/" + loops[0]).st_rdev)
    elif kind == "dir":
        os.mkdir(p)
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(p)
        s.close()
    return p


HOSTILE = ("fifo", "chardev", "blockdev", "dir", "socket")


def fast(e):
    """The kubelet, with calls that fail the case after 10 s instead of hanging the suite."""
    return Kubelet(Driver(e.bin, e.env, timeout=10), e.kubelet, e.node)


@case
def hostile_image_files_fail_fast(e):
    """A FIFO, device node, directory or socket named as the image: every op that opens the image
    (waitforattach, mountdevice, mount, expandfs; rw and ro) fails at once with a message,
    never opens the node (no side effect: inotify sees no open), binds, mounts or creates nothing."""
    k = fast(e)
    for kind in HOSTILE:
        p = plant(e, kind)
        w = OpenWatch(p) if kind != "socket" else None
        try:
            for ro in (False, True):
                o = e.opts(ro=ro)
                what = "%s%s" % (kind, " ro" if ro else "")
                k.attach(o, expect="Success")  # lexical only: attach touches nothing
                # isattached too: the logical attach, no node access (issue 10)
                check(k.isattached(o, expect="Success")["attached"] is True, "isattached %s" % what)
                calls = [("waitforattach", lambda: k.waitforattach("loop:vol1.img", o, expect="Failure")),
                         ("mountdevice", lambda: k.mountdevice("pv1", "/dev/loop0", o, expect="Failure")),
                         ("mount", lambda: k.mount("pod-a", "pv1", o, expect="Failure")),
                         ("expandfs", lambda: k.expandfs(o, "", "pod-a", "pv1", 128 << 20, 64 << 20,
                                                         expect="Failure"))]
                for name, c in calls:
                    t0 = time.monotonic()
                    r = c()
                    check(time.monotonic() - t0 < 5, "%s %s took %.1f s" % (name, what, time.monotonic() - t0))
                    check("not a regular file" in r["message"], "%s %s: %s" % (name, what, r["message"]))
                if w:
                    check(not w.opened(), "%s: the %s was opened" % (what, kind))
        finally:
            if w:
                w.close()
        check(set(os.listdir(e.root)) == {"vol1.img"}, "nothing created: %r" % os.listdir(e.root))
        if kind == "dir":
            os.rmdir(p)
        else:
            os.unlink(p)
        e.nothing_left(kind)


@case
def image_symlink_inside_root_refused(e):
    """The file option is taken literally: a symlink, even one that stays inside the root (and could
    point at a FIFO or device planted there), is refused by every op that opens the image."""
    k = fast(e)
    with open(e.image("real.img"), "wb") as f:
        f.truncate(64 << 20)
    os.symlink("real.img", e.image("alias.img"))
    os.mkfifo(e.image("pipe"))
    os.symlink("pipe", e.image("pipe.img"))
    for f in ("alias.img", "pipe.img"):
        o = e.opts(file=f)
        for c in (lambda: k.waitforattach("loop:" + f, o, expect="Failure"),
                  lambda: k.mountdevice("pv1", "", o, expect="Failure")):
            r = c()
            check("passes through a symlink" in r["message"], r["message"])
    e.nothing_left("image symlink")


# --- directory arguments taken literally (issue 9 item 4) --------------------

def foreign_mount(e):
    """A tmpfs that is not ours, with a file in it: it must survive every call below."""
    d = os.path.join(e.dir, "foreign")
    os.makedirs(d)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "foreign", d], check=True)
    with open(os.path.join(d, "precious"), "w") as f:
        f.write("x")
    return d


def foreign_intact(d):
    m = mounted_at(d)
    check(len(m) == 1 and m[0][2] == "tmpfs", "the foreign mount is gone: %r" % m)
    check(os.path.exists(os.path.join(d, "precious")), "the foreign mount's file is gone")


@case
def symlinked_pod_dir_is_refused(e):
    """unmount/mount of a pod dir that is a symlink (to a foreign mount): Failure, the foreign mount
    survives, nothing of ours lands there."""
    k = e.k
    o = e.opts()
    bring_up(e, uids=())
    d = foreign_mount(e)
    pd = k.poddir("pod-s", "pv1")
    os.makedirs(os.path.dirname(pd))
    os.symlink(d, pd)
    r = k.drv.call("unmount", pd, expect="Failure")
    check("symlink or magic link" in r["message"], r["message"])
    foreign_intact(d)
    r = k.drv.call("mount", pd, o, expect="Failure")
    check("symlink or magic link" in r["message"], r["message"])
    foreign_intact(d)
    # a symlink higher up (the pod's volumes dir)
    os.unlink(pd)
    up = k.poddir("pod-t", "pv1")
    os.makedirs(os.path.dirname(os.path.dirname(up)))
    real = os.path.join(e.dir, "elsewhere")
    os.makedirs(os.path.join(real, "pv1"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "other", os.path.join(real, "pv1")], check=True)
    os.symlink(real, os.path.dirname(up))
    r = k.drv.call("unmount", up, expect="Failure")
    check("symlink or magic link" in r["message"], r["message"])
    check(len(mounted_at(os.path.join(real, "pv1"))) == 1, "the mount behind the symlinked parent survives")
    subprocess.run(["umount", os.path.join(real, "pv1")], check=True)
    subprocess.run(["umount", d], check=True)
    k.unmountdevice("pv1", expect="Success")
    k.detach("pv1", expect="Success")
    e.nothing_left("symlinked pod dir")


@case
def symlinked_global_path_is_refused(e):
    """mountdevice/unmountdevice on a global path that is a symlink: Failure, nothing mounted through
    it, the foreign mount behind it survives and no loop device is released."""
    k = e.k
    o = e.opts()
    dev = k.waitforattach("loop:vol1.img", o, expect="Success")["device"]
    d = foreign_mount(e)
    g = k.gmp("pv1")
    os.makedirs(os.path.dirname(g))
    os.symlink(d, g)
    r = k.drv.call("mountdevice", g, dev, o, expect="Failure")
    check("symlink or magic link" in r["message"], r["message"])
    foreign_intact(d)
    r = k.drv.call("unmountdevice", g, expect="Failure")
    check("symlink or magic link" in r["message"], r["message"])
    foreign_intact(d)
    check(dev in e.loops(), "the binding is untouched")
    os.unlink(g)
    subprocess.run(["umount", d], check=True)
    k.detach("pv1", expect="Success")
    e.nothing_left("symlinked global path")


@case
def proc_magic_link_forms_are_refused(e):
    """/proc/self/root/<dir> and /proc/self/cwd/<dir> name the same directory through a magic link:
    refused by every op that takes a directory; the real mounts stay."""
    k = e.k
    o = e.opts()
    dev = bring_up(e)
    g, pd = k.gmp("pv1"), k.poddir("pod-a", "pv1")
    forms = lambda p: ("/proc/self/root" + p, "/proc/self/cwd" + p, "/proc/%d/root%s" % (os.getpid(), p))
    for p in forms(pd):
        r = k.drv.call("unmount", p, expect="Failure")
        check("symlink or magic link" in r["message"], "%s: %s" % (p, r["message"]))
        r = k.drv.call("mount", p, o, expect="Failure")
        check("symlink or magic link" in r["message"], "%s: %s" % (p, r["message"]))
    for p in forms(g):
        r = k.drv.call("unmountdevice", p, expect="Failure")
        check("symlink or magic link" in r["message"], "%s: %s" % (p, r["message"]))
        r = k.drv.call("mountdevice", p, dev, o, expect="Failure")
        check("symlink or magic link" in r["message"], "%s: %s" % (p, r["message"]))
    check(len(mounted_at(pd)) == 1 and len(mounted_at(g)) == 1, "the mounts stay")
    check(dev in e.loops(), "the binding stays")
    # a mountdevice through the caller's cwd: the driver runs with cwd=/, the target is relative
    other = os.path.join(e.dir, "cwdtarget")
    os.makedirs(other)
    p = subprocess.run([e.bin, "mountdevice", "/proc/self/cwd/cwdtarget", dev, o], cwd=e.dir, env=e.env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    check(json.loads(p.stdout)["status"] == "Failure" and not mounted_at(other), p.stdout)
    tear_down(e)
    e.nothing_left("proc forms")


@case
def missing_dirs_are_not_created(e):
    """kubelet creates the directory before mountdevice/mount (§4.1): a missing one is a Failure and
    the driver creates nothing; unmount/unmountdevice of a missing one is Success (undo of nothing)."""
    k = e.k
    o = e.opts()
    dev = k.waitforattach("loop:vol1.img", o, expect="Success")["device"]
    g = os.path.join(e.dir, "nonexistent", "plugins", "mounts", "ghost")
    r = k.drv.call("mountdevice", g, dev, o, expect="Failure")
    check("does not exist" in r["message"], r["message"])
    check(not os.path.exists(os.path.join(e.dir, "nonexistent")), "mountdevice created the dir")
    k.mountdevice("pv1", dev, o, expect="Success")
    pd = os.path.join(e.dir, "nonexistent", "x")
    r = k.drv.call("mount", pd, o, expect="Failure")
    check("does not exist" in r["message"], r["message"])
    check(not os.path.exists(os.path.join(e.dir, "nonexistent")), "mount created the dir")
    k.drv.call("unmount", pd, expect="Success")
    k.drv.call("unmountdevice", g, expect="Success")
    # a file where the directory should be
    f = os.path.join(e.dir, "afile")
    open(f, "w").close()
    r = k.drv.call("mount", f, o, expect="Failure")
    check("not a directory" in r["message"], r["message"])
    k.unmountdevice("pv1", expect="Success")
    k.detach("pv1", expect="Success")
    e.nothing_left("missing dirs")


@case
def dir_arguments_normalised_lexically(e):
    """"//" and "/./" name the same directory (no symlink involved): accepted, normalised; ".." and
    a relative path are refused before anything happens."""
    k = e.k
    o = e.opts()
    dev = bring_up(e, uids=())
    pd = k.poddir("pod-n", "pv1")
    os.makedirs(pd)
    odd = pd.replace("/pods/", "//pods/./")
    k.drv.call("mount", odd, o, expect="Success")
    check(len(mounted_at(pd)) == 1 and mounted_at(pd)[0][1] == dev, mounted_at(pd))
    k.drv.call("mount", pd, o, expect="Success")  # the same directory: already mounted
    check(len(mounted_at(pd)) == 1, "one mount: %r" % mounted_at(pd))
    for bad in (pd + "/../pv1", "relative/dir"):
        r = k.drv.call("unmount", bad, expect="Failure")
        check("plain absolute path" in r["message"], r["message"])
    check(len(mounted_at(pd)) == 1, "still mounted")
    k.drv.call("unmount", odd, expect="Success")
    check(not mounted_at(pd), "unmounted")
    k.unmountdevice("pv1", expect="Success")
    k.detach("pv1", expect="Success")
    e.nothing_left("normalised")


def make_env(build, name):
    return Env(build, name)


OWNER = "trusted.flexvol.owner"


@case
def image_owner_refuses_another_volume(e):
    """Issue 17 point 7: an image belongs to the first volume that mounted it (an xattr with its
    name); another volume naming it is refused, nothing changes on the host, until an operator
    clears the record."""
    k = e.k
    bring_up(e, "pv1")
    check(os.getxattr(e.image(), OWNER) == b"pv1", "owner recorded: %r" % os.listxattr(e.image()))
    tear_down(e, "pv1")
    st = os.stat(e.image())
    o2 = e.opts("pv2")
    r = k.waitforattach("loop:vol1.img", o2, expect="Failure")
    check("belongs to" in r["message"] and "pv1" in r["message"], r["message"])
    os.makedirs(k.gmp("pv2"), exist_ok=True)
    r = k.mountdevice("pv2", "/dev/loop0", o2, expect="Failure")
    check("belongs to" in r["message"] and OWNER in r["message"], r["message"])
    r = k.mount("pod-b", "pv2", o2, expect="Failure")
    e.nothing_left("another volume refused")
    st2 = os.stat(e.image())
    check((st.st_mtime_ns, st.st_size) == (st2.st_mtime_ns, st2.st_size), "image untouched")
    check(os.getxattr(e.image(), OWNER) == b"pv1", "owner kept")
    k.detach("pv2", expect="Success")
    # the operator's way out (docs/design.md): remove the record, then pv2 may have it
    os.removexattr(e.image(), OWNER)
    bring_up(e, "pv2", o2)
    check(os.getxattr(e.image(), OWNER) == b"pv2", "new owner recorded")
    tear_down(e, "pv2")
    e.nothing_left("owner")
