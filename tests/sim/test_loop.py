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
    check(k.isattached(o, expect="Success")["attached"] is False, "not attached before waitforattach")
    w1, w2 = twice(k.waitforattach, a1["device"], o, expect="Success")
    check(w1["device"] == w2["device"], "one device: %r %r" % (w1, w2))
    dev = w1["device"]
    check(list(e.loops()) == [dev], "exactly one binding: %r" % e.loops())
    check(os.path.getsize(e.image()) == 64 << 20, "sparse image of the requested size")
    check(k.isattached(o, expect="Success")["attached"] is True, "isattached from the kernel")
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
    check(k.isattached(o, expect="Success")["attached"] is False, "false after detach")
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
    """kubernetes.io/readwrite=ro: bound read-only, mounted read-only, writes fail with EROFS."""
    k = e.k
    bring_up(e)
    with open(os.path.join(k.poddir("pod-a", "pv1"), "ro.txt"), "w") as f:
        f.write("written rw")
    tear_down(e)
    o = e.opts(ro=True)
    dev = bring_up(e, opts=o, uids=("pod-r",))
    check(loop_ro(dev), "the loop device itself is read-only")
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
    """A symlink inside the root that points out of it is refused on the node (openat2 RESOLVE_BENEATH)."""
    target = os.path.join(e.dir, "outside.img")
    with open(target, "wb") as f:
        f.truncate(64 << 20)
    os.symlink(target, os.path.join(e.root, "link.img"))
    os.symlink("..", os.path.join(e.root, "up"))
    for f in ("link.img", "up/outside.img"):
        o = e.opts(file=f)
        r = e.k.waitforattach("loop:" + f, o, expect="Failure")
        check("outside the loop root" in r["message"], r["message"])
        r = e.k.mountdevice("pv1", "", o, expect="Failure")
        check("outside the loop root" in r["message"], r["message"])
    # a symlink that stays inside is fine
    with open(e.image("real.img"), "wb") as f:
        f.truncate(64 << 20)
    os.symlink("real.img", e.image("alias.img"))
    dev = e.k.waitforattach("loop:alias.img", e.opts(file="alias.img"), expect="Success")["device"]
    check(e.loops() == {dev: e.image("real.img")}, e.loops())
    e.k.detach("pv1", expect="Success")
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


@case
def sigkill_during_mountdevice(e):
    """SIGKILL while mkfs runs (a wrapper that pauses before the real mkfs), then a retry:
    one binding, one mount, a valid filesystem."""
    k = e.k
    wrap = os.path.join(e.dir, "helpers")
    os.makedirs(wrap)
    fifo = os.path.join(e.dir, "gate")
    started = os.path.join(e.dir, "mkfs-started")
    done = os.path.join(e.dir, "mkfs-done")
    os.mkfifo(fifo)
    with open(os.path.join(wrap, "mkfs.ext4"), "w") as f:
        f.write("#!/bin/sh\n: > %s\nread x < %s\n/sbin/mkfs.ext4 \"$@\"\nrc=$?\n: > %s\nexit $rc\n"
                % (started, fifo, done))
    os.chmod(os.path.join(wrap, "mkfs.ext4"), 0o755)
    o = e.opts()
    dev = k.waitforattach("loop:vol1.img", o, expect="Success")["device"]
    env = dict(e.env, FLEXVOL_HELPER_PATH=wrap + ":/usr/sbin:/usr/bin:/sbin:/bin")
    os.makedirs(k.gmp("pv1"), exist_ok=True)
    p = subprocess.Popen([e.bin, "mountdevice", k.gmp("pv1"), dev, o], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    # kill the driver while mkfs is running: wait for the wrapper to start
    deadline = time.monotonic() + 60
    while not os.path.exists(started) and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.01)
    check(os.path.exists(started), "the mkfs wrapper never started")
    p.send_signal(signal.SIGKILL)
    p.communicate()
    # the paused helper still waits at the gate (a killed driver cannot kill it): let it go on
    try:
        g = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.write(g, b"go\n")
        os.close(g)
    except OSError:
        pass  # no reader left: nothing to release
    else:  # the orphaned mkfs finishes on its own; the retry comes after it
        deadline = time.monotonic() + 60
        while not os.path.exists(done) and time.monotonic() < deadline:
            time.sleep(0.01)
    k.mountdevice("pv1", dev, o, expect="Success")
    k.mountdevice("pv1", dev, o, expect="Success")
    m = mounted_at(k.gmp("pv1"))
    check(len(m) == 1 and m[0][2] == "ext4", "one ext4 mount: %r" % m)
    check(list(e.loops()) == [dev], "one binding")
    k.unmountdevice("pv1", expect="Success")
    k.detach("pv1", expect="Success")
    e.nothing_left("kill mountdevice")


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
    r = k.drv.call("waitforattach", "loop:x", e.opts(), env=env, expect="Failure")
    check("lock" in r["message"] and time.monotonic() - t0 < 10, r["message"])
    os.close(fd)
    k.waitforattach("loop:x", e.opts(), expect="Success")
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


def make_env(build, name):
    return Env(build, name)
