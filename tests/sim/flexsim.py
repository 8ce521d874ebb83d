"""flexsim: call a FlexVolume driver exactly as kubelet and kube-controller-manager do.

The contract (docs/flexvolume-contract.md) in the few lines that
shape every assertion here:

  * exec(<plugindir>/<vendor~driver>/<driver>, [op, args...]); stdout and stderr
    are combined (cmd.CombinedOutput()); no stdin.                         (§1.1)
  * json.Unmarshal on the whole buffer: any byte before or after the single JSON
    value fails the call; empty output is "unexpected end of JSON input".  (§3.1)
  * the options are a map[string]string marshalled by Go: compact, keys sorted,
    <, >, &, U+2028, U+2029 escaped as \\u003c \\u003e \\u0026 \\u2028 \\u2029.   (§2)
  * "attached" and the capabilities are JSON booleans; a string is a hard error.
  * status words are exactly "Success", "Failure", "Not supported".

Every call made through Driver.call() is checked against all of that.
"""
import json
import os
import re
import subprocess
import time

STATUSES = ("Success", "Failure", "Not supported")
CAPS = ("attach", "selinuxRelabel", "supportsMetrics", "fsGroup", "requiresFSResize")


class ContractError(AssertionError):
    pass


class Fail(AssertionError):
    """A case's own assertion failed."""


def check(cond, what):
    if not cond:
        raise Fail(what)


def in_parallel(calls):
    """Run each zero-argument callable in its own thread, all at once.
    Returns (results, errors): the return values of those that finished and
    the exceptions of those that raised."""
    import threading
    results, errors = [], []

    def run(fn):
        try:
            results.append(fn())
        except Exception as err:  # noqa: BLE001 - handed back to the case
            errors.append(err)

    ts = [threading.Thread(target=run, args=(fn,)) for fn in calls]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return results, errors


def case_registry():
    """A case module's list of cases and the decorator that fills it."""
    cases = []

    def case(fn):
        cases.append(fn)
        return fn
    return cases, case


def go_json(opts):
    """Marshal a map[string]string the way Go's encoding/json does."""
    for k, v in opts.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError("kubelet options are strings only")
    s = json.dumps(opts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                    ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        s = s.replace(ch, esc)
    return s


class Reply(dict):
    """A parsed reply, plus how it came about."""

    def __init__(self, doc, argv, rc, elapsed, raw=""):
        super().__init__(doc)
        self.raw = raw  # the bytes kubelet would parse, as text
        self.argv = argv
        self.rc = rc
        self.elapsed = elapsed

    @property
    def status(self):
        return self["status"]

    def __repr__(self):
        return "%s -> rc=%d %s" % (" ".join(self.argv[1:2]), self.rc, json.dumps(dict(self)))


class Driver:
    """One installed driver, called the way kubelet calls it."""

    def __init__(self, path, env, name=None, timeout=120, trace=None):
        self.path = path
        self.env = env
        self.name = name or os.path.basename(path)
        self.timeout = timeout
        self.trace = trace  # callable(argv, reply) for the demo
        self.calls = []

    def spawn(self, *args):
        """Start a call without waiting (for kill tests)."""
        return subprocess.Popen([self.path, *args], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=self.env, cwd="/", start_new_session=False)

    def call(self, *args, expect=None, env=None):
        argv = [self.path, *args]
        t0 = time.monotonic()
        # communicate() returns at EOF on both pipes, not at exit: a helper left
        # holding the caller's pipe shows up as a timeout here, as in kubelet.
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, env=env or self.env, cwd="/",
                           timeout=self.timeout)
        elapsed = time.monotonic() - t0
        r = check_output(argv, p.returncode, p.stdout, p.stderr, elapsed)
        self.calls.append(r)
        if self.trace:
            self.trace(argv, r)
        if expect is not None and r.status != expect:
            raise ContractError("%s: expected %s, got %r" % (args[0] if args else "-", expect, r))
        return r


def check_output(argv, rc, out, err, elapsed):
    if err:
        raise ContractError("%s wrote to stderr: %r" % (argv[1:2], err[:500]))
    try:
        text = out.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ContractError("%s: output is not UTF-8: %s" % (argv[1:2], e))
    try:
        doc = json.loads(text)  # the whole output must be one JSON value
    except json.JSONDecodeError as e:
        raise ContractError("%s: output is not one JSON document (%s): %r" % (argv[1:2], e, text[:500]))
    if not isinstance(doc, dict):
        raise ContractError("%s: reply is not an object: %r" % (argv[1:2], text))
    st = doc.get("status")
    if st not in STATUSES:
        raise ContractError("%s: bad status %r" % (argv[1:2], st))
    if rc != (1 if st == "Failure" else 0):
        raise ContractError("%s: exit %d does not match status %s" % (argv[1:2], rc, st))
    if st == "Failure" and not (isinstance(doc.get("message"), str) and doc["message"].strip()):
        raise ContractError("%s: Failure without a message: %r" % (argv[1:2], doc))
    if "attached" in doc and not isinstance(doc["attached"], bool):
        raise ContractError("%s: attached is not a boolean: %r" % (argv[1:2], doc))
    if "device" in doc and not isinstance(doc["device"], str):
        raise ContractError("%s: device is not a string: %r" % (argv[1:2], doc))
    if "capabilities" in doc:
        caps = doc["capabilities"]
        if not isinstance(caps, dict) or any(not isinstance(caps.get(k), bool) for k in CAPS):
            raise ContractError("%s: capabilities must carry every key as a boolean: %r" % (argv[1:2], caps))
    for k in doc:
        if k not in ("status", "message", "device", "attached", "capabilities", "volumeName", "version"):
            raise ContractError("%s: unexpected key %r" % (argv[1:2], k))
    return Reply(doc, argv, rc, elapsed, text)


class Kubelet:
    """The kubelet and controller-manager side of one node, for one driver."""

    VENDOR = "flexvol"

    def __init__(self, drv, root, node):
        self.drv = drv
        self.root = root
        self.node = node

    def gmp(self, vol):
        # <root>/plugins/kubernetes.io/flexvolume/<vendor>/<driver>/mounts/<volName>  (§2)
        return os.path.join(self.root, "plugins/kubernetes.io/flexvolume", self.VENDOR,
                            self.drv.name, "mounts", vol)

    def poddir(self, uid, vol):
        # <root>/pods/<podUID>/volumes/<vendor>~<driver>/<volName>  (§2)
        return os.path.join(self.root, "pods", uid, "volumes",
                            "%s~%s" % (self.VENDOR, self.drv.name), vol)

    @staticmethod
    def options(vol, user, fstype="", ro=False, pod=None, secrets=None, fsgroup=None):
        """NewOptionsForDriver: computed keys, then user options last (they win)."""
        o = {"kubernetes.io/fsType": fstype, "kubernetes.io/readwrite": "ro" if ro else "rw",
             "kubernetes.io/pvOrVolumeName": vol}
        if pod:
            o.update({"kubernetes.io/pod.name": pod, "kubernetes.io/pod.namespace": "default",
                      "kubernetes.io/pod.uid": pod, "kubernetes.io/serviceAccount.name": "default"})
        if fsgroup is not None:
            o["kubernetes.io/mounterArgs.FsGroup"] = str(fsgroup)
        for k, v in (secrets or {}).items():
            import base64
            o["kubernetes.io/secret/" + k] = base64.b64encode(v.encode()).decode()
        o.update(user)
        return go_json(o)

    # --- the calls, with the argv of §1.2 ---------------------------------
    def init(self, **kw):
        return self.drv.call("init", **kw)

    def attach(self, opts, node=None, **kw):
        return self.drv.call("attach", opts, node or self.node, **kw)

    def isattached(self, opts, node=None, **kw):
        return self.drv.call("isattached", opts, node or self.node, **kw)

    def waitforattach(self, device, opts, **kw):
        return self.drv.call("waitforattach", device, opts, **kw)

    def mountdevice(self, vol, device, opts, **kw):
        os.makedirs(self.gmp(vol), exist_ok=True)  # kubelet: mkdir -p GMP first (§4.1)
        return self.drv.call("mountdevice", self.gmp(vol), device, opts, **kw)

    def mount(self, uid, vol, opts, **kw):
        os.makedirs(self.poddir(uid, vol), exist_ok=True)
        return self.drv.call("mount", self.poddir(uid, vol), opts, **kw)

    def unmount(self, uid, vol, **kw):
        return self.drv.call("unmount", self.poddir(uid, vol), **kw)

    def unmountdevice(self, vol, **kw):
        return self.drv.call("unmountdevice", self.gmp(vol), **kw)

    def detach(self, vol, node=None, **kw):
        return self.drv.call("detach", vol, node or self.node, **kw)

    def expandfs(self, opts, device, uid, vol, new, old, **kw):
        return self.drv.call("expandfs", opts, device, self.poddir(uid, vol), str(new), str(old), **kw)


# --- kernel views, for assertions ----------------------------------------

def mounts():
    """(mount point, source, fstype, vfs options, root) from this namespace's mountinfo."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            a = line.split()
            sep = a.index("-")
            out.append((unescape(a[4]), unescape(a[sep + 2]), a[sep + 1], a[5], unescape(a[3])))
    return out


def unescape(s):
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), s)


def mounted_at(path):
    return [m for m in mounts() if m[0] == path]


def mounts_under(prefix):
    prefix = prefix.rstrip("/") + "/"
    return [m for m in mounts() if m[0].startswith(prefix)]


def loop_bindings():
    """{'/dev/loopN': backing file} for every bound loop device (sysfs)."""
    out = {}
    for name in os.listdir("/sys/block"):
        if not name.startswith("loop"):
            continue
        try:
            with open("/sys/block/%s/loop/backing_file" % name) as f:
                out["/dev/" + name] = f.read().rstrip("\n")
        except OSError:
            pass
    return out


def loops_under(prefix):
    prefix = prefix.rstrip("/") + "/"
    return {d: f for d, f in loop_bindings().items() if f.startswith(prefix)}


def loop_ro(dev):
    with open("/sys/block/%s/ro" % os.path.basename(dev)) as f:
        return f.read().strip() == "1"


def cleanup(prefix):
    """Unmount everything under @prefix (deepest first) and detach, by name,
    every loop device whose backing file lies under it."""
    for _ in range(5):
        ms = sorted({m[0] for m in mounts_under(prefix)}, key=len, reverse=True)
        if not ms:
            break
        for m in ms:
            subprocess.run(["umount", "-l", m], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for dev in loops_under(prefix):
        subprocess.run(["losetup", "-d", dev], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return not mounts_under(prefix) and not loops_under(prefix)


def dead(pid):
    """Has process @pid ended (gone, or a zombie nobody reaped yet)?"""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def in_private_mount_ns(argv):
    """Re-exec @argv in a private mount namespace (once): test mounts never reach the host."""
    if os.environ.get("FLEXSIM_NS") == "1":
        return
    env = dict(os.environ, FLEXSIM_NS="1")
    os.execvpe("unshare", ["unshare", "--mount", "--propagation", "private", *argv], env)
