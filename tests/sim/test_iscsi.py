"""Host-lane tests of the iscsi driver: option validation, the credentials file,
and the mapping of iscsiadm errors that a real target cannot produce on demand.

This host's kernel has no iSCSI initiator (docs/test-lanes.md), so the real login,
device, mount, logout and resize paths are tested in the VM lane
(tests/vm/iscsi_driver.py).  Here a fake `iscsiadm` (first in
FLEXVOL_HELPER_PATH) answers from a scenario file and records its argv; the
real iscsiadm is never run on the host.

Run by tests/sim/run.py (make check); `tests/sim/run.py -k <name>` for one case.
"""
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flexsim import Driver, Kubelet, case_registry, check, cleanup  # noqa: E402

CASES, case = case_registry()
IQN = "iqn.2024-01.io.flexvol.test:target1"
PORTAL = "127.0.0.1:3260"





FAKE = r'''#!/usr/bin/python3
# fake iscsiadm for the host lane: record argv, answer from scenario.json
import json, os, sys, time
d = os.path.dirname(os.path.abspath(sys.argv[0]))
a = sys.argv[1:]
with open(os.path.join(d, "calls"), "a") as f:
    f.write(json.dumps(a) + "\n")
try:
    sc = json.load(open(os.path.join(d, "scenario.json")))
except OSError:
    sc = {}
if "--discover" in a or ("-m" in a and a[a.index("-m") + 1] == "discovery"):
    kind = "discover"
elif "--login" in a:
    kind = "login"
elif "--logout" in a:
    kind = "logout"
elif "update" in a:
    kind = "update"
else:
    kind = "other"
portal = a[a.index("-p") + 1] if "-p" in a else ""
# a small database of node and discovery records: "-o new" adds, "-o delete" removes, a
# plain query ("-m node -T -p -I", "-m discoverydb -t -p") answers 0 or 21 (no records)
mode = a[a.index("-m") + 1] if "-m" in a else ""
op = a[a.index("-o") + 1] if "-o" in a else ""
dbf = os.path.join(d, "db.json")
try:
    db = json.load(open(dbf))
except (OSError, ValueError):
    db = sc.get("db", [])
rec = [mode, a[a.index("-T") + 1] if "-T" in a else "", portal] + ([a[a.index("-I") + 1]] if mode == "node" and "-I" in a else [])
if mode in ("node", "discoverydb") and op in ("new", "delete"):
    if op == "new" and rec not in db:
        db.append(rec)
    if op == "delete":
        db = [r for r in db if not (r[0] == mode and r[2] == portal and (mode == "discoverydb" or r[1] == rec[1]))]
    json.dump(db, open(dbf, "w"))
if mode in ("node", "discoverydb") and not op and "--login" not in a and "--discover" not in a and "-T" in a + ["-T"] and portal:
    if kind == "other":
        kind = "query"
        if not any(rule.get("kind") == "query" for rule in sc.get("rules", [])):
            sys.exit(0 if rec in db else 21)
for rule in sc.get("rules", []):
    if rule.get("kind") == kind and rule.get("arg", "") in a + [""]:
        if rule.get("sleep"):
            t0 = time.time()
            time.sleep(rule["sleep"])
            with open(os.path.join(d, "spans"), "a") as f:
                f.write(json.dumps([kind, a, t0, time.time()]) + "\n")
        sys.stdout.write(rule.get("out", ""))
        sys.exit(rule.get("rc", 0))
if kind == "discover":
    for t in sc.get("targets", []):
        print("%s,1 %s" % (portal, t))
sys.exit(0)
'''


class Env:
    def __init__(self, build, name):
        self.dir = tempfile.mkdtemp(prefix="flexsim-iscsi-%s." % name, dir="/tmp")
        self.fake = os.path.join(self.dir, "fakebin")
        os.makedirs(self.fake)
        with open(os.path.join(self.fake, "iscsiadm"), "w") as f:
            f.write(FAKE)
        os.chmod(os.path.join(self.fake, "iscsiadm"), 0o755)
        self.scenario(targets=[IQN])
        self.log = os.path.join(self.dir, "iscsi.log")
        self.chapdir = os.path.join(self.dir, "chap")
        os.mkdir(self.chapdir, 0o700)
        self.node = os.uname().nodename
        self.env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "FLEXVOL_CONFIG": "/dev/null",
                    "FLEXVOL_STATE_DIR": os.path.join(self.dir, "state"),
                    "FLEXVOL_RUN_DIR": os.path.join(self.dir, "run"), "FLEXVOL_LOG_FILE": self.log,
                    "FLEXVOL_HELPER_PATH": self.fake + ":/usr/sbin:/usr/bin:/sbin:/bin",
                    "FLEXVOL_HELPER_TIMEOUT": "20", "FLEXVOL_DEVICE_TIMEOUT": "1",
                    "FLEXVOL_CHAP_DIR": self.chapdir}
        for k in ("ASAN_OPTIONS", "UBSAN_OPTIONS"):
            if k in os.environ:
                self.env[k] = os.environ[k]
        self.drv = Driver(os.path.join(build, "iscsi"), self.env, timeout=60)
        self.k = Kubelet(self.drv, os.path.join(self.dir, "kubelet"), self.node)

    def scenario(self, targets=None, rules=None):
        with open(os.path.join(self.fake, "scenario.json"), "w") as f:
            json.dump({"targets": targets if targets is not None else [IQN], "rules": rules or []}, f)

    def calls(self):
        try:
            with open(os.path.join(self.fake, "calls")) as f:
                return [json.loads(l) for l in f]
        except OSError:
            return []

    def opts(self, vol="pv1", **user):
        u = {"targetPortal": PORTAL, "iqn": IQN, "lun": "1"}
        u.update(user)
        u = {k: v for k, v in u.items() if v is not None}
        return self.k.options(vol, u, fstype="ext4")

    def creds(self, text, mode=0o600, name="chap.conf", where=None):
        p = os.path.join(where or self.chapdir, name)
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(fd, text.encode())
        os.close(fd)
        os.chmod(p, mode)
        return p

    def logtext(self):
        try:
            with open(self.log) as f:
                return f.read()
        except OSError:
            return ""

    def close(self):
        """The fake iscsiadm binds and mounts nothing; anything under the scratch dir is a leak."""
        ok = cleanup(self.dir)
        shutil.rmtree(self.dir, ignore_errors=True)
        return ok


def failure(r, *words):
    check(r.status == "Failure", "expected Failure, got %r" % r)
    for w in words:
        check(w in r["message"], "message %r lacks %r" % (r["message"], w))


# --- contract basics ----------------------------------------------------------------

@case
def init_capabilities(e):
    r = e.k.init(expect="Success")
    check(r["capabilities"] == {"attach": True, "selinuxRelabel": True, "supportsMetrics": True,
                                "fsGroup": True, "requiresFSResize": True}, "%r" % r)


@case
def unsupported_ops(e):
    e.drv.call("getvolumename", e.opts(), expect="Not supported")
    e.drv.call("expandvolume", e.opts(), "/x", "2", "1", expect="Not supported")


@case
def attach_by_path_handles(e):
    """attach answers udev's by-path name and touches nothing (no iscsiadm)."""
    for portal, lun, want in (
            ("127.0.0.1", "1", "ip-127.0.0.1:3260-iscsi-%s-lun-1" % IQN),
            ("10.0.0.7:3261", "0", "ip-10.0.0.7:3261-iscsi-%s-lun-0" % IQN),
            ("san-1.example.com", "17", "ip-san-1.example.com:3260-iscsi-%s-lun-17" % IQN),
            ("[fd00::7]:3260", "2", "ip-[fd00::7]:3260-iscsi-%s-lun-2" % IQN),
            ("127.0.0.1", "300", "ip-127.0.0.1:3260-iscsi-%s-lun-0x012c000000000000" % IQN)):
        r = e.k.attach(e.opts(targetPortal=portal, lun=lun), expect="Success")
        check(r["device"] == "/dev/disk/by-path/" + want, "%s: %r" % (portal, r))
    for iqn in ("eui.02004567A425678D", "naa.52004567BA64678D", "iqn.2001-04.com.example:storage.disk2.sys1.xyz"):
        e.k.attach(e.opts(iqn=iqn), expect="Success")
    check(e.calls() == [], "attach ran iscsiadm: %r" % e.calls())


BAD = [
    ({"targetPortal": None}, "'targetPortal' is required"),
    ({"targetPortal": "127.0.0.1:0"}, "targetPortal"),
    ({"targetPortal": "127.0.0.1:65536"}, "targetPortal"),
    ({"targetPortal": "127.0.0.1:32a"}, "targetPortal"),
    ({"targetPortal": "fd00::7"}, "targetPortal"),
    ({"targetPortal": "[fd00::zz]:3260"}, "targetPortal"),
    ({"targetPortal": "300.1.1.1"}, "targetPortal"),
    ({"targetPortal": "host name"}, "targetPortal"),
    ({"targetPortal": "-oops.example"}, "targetPortal"),
    ({"targetPortal": "127.0.0.1;reboot"}, "targetPortal"),
    ({"targetPortal": "$(reboot)"}, "targetPortal"),
    ({"portals": "127.0.0.1,,127.0.0.2"}, "'portals'"),
    ({"portals": "127.0.0.1,"}, "'portals'"),
    ({"portals": "127.0.0.1 -o delete"}, "'portals'"),
    ({"portals": ",".join("10.0.0.%d" % i for i in range(1, 10))}, "more than 7"),
    ({"iqn": None}, "'iqn' is required"),
    ({"iqn": "iqn.2024-1.io.x:y"}, "'iqn'"),
    ({"iqn": "iqn.2024-01.IO.x:y"}, "'iqn'"),
    ({"iqn": "iqn.2024-01.io.x:y z"}, "'iqn'"),
    ({"iqn": "iqn.2024-01.io.x:$(reboot)"}, "'iqn'"),
    ({"iqn": "iqn.2024-01.io.x:" + "a" * 220}, "'iqn'"),
    ({"iqn": "eui.0200"}, "'iqn'"),
    ({"iqn": "naa.52004567BA64678G"}, "'iqn'"),
    ({"iqn": "-T"}, "'iqn'"),
    ({"iqn": IQN + "\u0000x"}, "NUL"),
    ({"targetPortal": "127.0.0.1\u0000:3261"}, "NUL"),
    ({"lun": None}, "'lun' is required"),
    ({"lun": "-1"}, "'lun'"),
    ({"lun": "16384"}, "'lun'"),
    ({"lun": "01"}, "'lun'"),
    ({"lun": "1 "}, "'lun'"),
    ({"lun": "0x1"}, "'lun'"),
    ({"iface": "-I"}, "'iface'"),
    ({"iface": "eth0;x"}, "'iface'"),
    ({"iface": "a" * 65}, "'iface'"),
    ({"chapCredentialsFile": "/etc/../etc/shadow"}, "chapCredentialsFile"),
    ({"chapCredentialsFile": "a/../../x"}, "chapCredentialsFile"),
]


def bad_case(i, user, word):
    def fn(e):
        for op in ("attach", "waitforattach", "isattached", "mountdevice", "mount"):
            o = e.opts(**user)
            if op == "attach":
                r = e.k.attach(o)
            elif op == "isattached":
                r = e.k.isattached(o)
            elif op == "waitforattach":
                r = e.k.waitforattach("", o)
            elif op == "mountdevice":
                r = e.k.mountdevice("pv1", "/dev/sdz", o)
            else:
                r = e.k.mount("pod-a", "pv1", o)
            failure(r, word)
        check(e.calls() == [], "iscsiadm ran for invalid options: %r" % e.calls())
    fn.__name__ = "invalid_option_%02d_%s" % (i, list(user)[0])
    return fn


for _i, (_u, _w) in enumerate(BAD):
    case(bad_case(_i, _u, _w))


@case
def bad_fstype_and_readwrite(e):
    o = e.k.options("pv1", {"targetPortal": PORTAL, "iqn": IQN, "lun": "1"}, fstype="ntfs")
    failure(e.k.attach(o), "fsType 'ntfs' is not supported")
    o = json.loads(e.opts())
    o["kubernetes.io/readwrite"] = "maybe"
    failure(e.k.attach(json.dumps(o)), "readwrite")


@case
def ops_without_volume_name(e):
    """The options' volume name identifies nothing (a PV author can set it): waitforattach works
    from the target and LUN alone, and mountdevice takes the name from its global path."""
    o = json.loads(e.opts())
    del o["kubernetes.io/pvOrVolumeName"]
    r = e.k.waitforattach("", json.dumps(o))
    check("pvOrVolumeName" not in r["message"], r["message"])
    check(e.calls() != [], "waitforattach went on to the login")


# --- the credentials file -------------------------------------------------------------

def creds_refused(e, path, *words):
    r = e.k.waitforattach("", e.opts(chapCredentialsFile=path))
    failure(r, *words)
    check(e.calls() == [], "iscsiadm ran with refused credentials: %r" % e.calls())
    return r


@case
def creds_group_or_world_readable(e):
    for mode in (0o640, 0o604, 0o660, 0o601):
        p = e.creds("session.username = u\nsession.password = topsecret-1234\n", mode=mode)
        r = creds_refused(e, p, "group/world", "mode %04o" % mode)
        check("topsecret" not in r["message"], "secret in message")


@case
def creds_not_root_owned(e):
    p = e.creds("session.username = u\nsession.password = topsecret-1234\n")
    os.chown(p, 65534, 65534)
    creds_refused(e, p, "owned by uid 65534", "not root")


@case
def creds_symlink_refused(e):
    p = e.creds("session.username = u\nsession.password = topsecret-1234\n")
    link = os.path.join(e.chapdir, "link.conf")
    os.symlink(p, link)
    creds_refused(e, link, "symlink")
    creds_refused(e, "link.conf", "symlink")


@case
def creds_missing_or_not_a_file(e):
    creds_refused(e, os.path.join(e.chapdir, "nope.conf"), "credentials file", "does not exist")
    os.mkdir(os.path.join(e.chapdir, "adir"), 0o700)
    creds_refused(e, os.path.join(e.chapdir, "adir"), "not a regular file", "a directory")


@case
def creds_syntax_errors(e):
    for text, words in (
            ("session.user = u\nsession.password = topsecret-1234\n", ("line 1", "unknown key")),
            ("session.username = u\n", ("session.username and session.password go together",)),
            ("session.password = topsecret-1234\n", ("go together",)),
            ("session.username = u\nsession.password = topsecret-1234\nsession.username_in = t\n",
             ("username_in and session.password_in go together",)),
            ("discovery.username_in = t\ndiscovery.password_in = topsecret-1234\n", ("mutual CHAP",)),
            ("# c\n\nsession.username u\n", ("line 3", "not 'key = value'")),
            ("session.username = u\nsession.username = v\n", ("line 2", "set twice")),
            ("session.username = \nsession.password = x\n", ("line 1", "1 to 255")),
            ("session.username = u\nsession.password = %s\n" % ("x" * 256), ("line 2", "1 to 255")),
            ("session.username = u\nsession.password = top\x01secret\n", ("control character",))):
        p = e.creds(text)
        r = creds_refused(e, p, *words)
        check("topsecret" not in r["message"] and "top\x01" not in r["message"], "secret in %r" % r)


@case
def creds_bad_lines_not_quoted(e):
    """A malformed line is named by its number only: its text may hold a secret (a
    typo'd key, a ':' for '='), in the reply and in the log."""
    for text, words in (
            ("session.username = u\nsession.password: S3CRET-4711 = x\n", ("line 2", "unknown key")),
            ("session.username = u\nS3CRET-4711\n", ("line 2", "not 'key = value'")),
            ("session.username = u\nsession.pasword = S3CRET-4711\n", ("line 2", "unknown key")),
            ("S3CRET-4711 = x\n", ("line 1", "unknown key"))):
        p = e.creds(text)
        r = creds_refused(e, p, *words)
        check("S3CRET" not in r["message"], "line text quoted: %r" % r["message"])
        check("S3CRET" not in e.logtext(), "line text logged: %r" % e.logtext())
        check("pasword" not in r["message"], "unknown key quoted: %r" % r["message"])


class OpenWatch:
    """inotify IN_OPEN|IN_CLOSE_NOWRITE on one path: did anything open() it?  (O_PATH opens nothing.)"""

    def __init__(self, path):
        import ctypes
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        check(self.fd >= 0, "inotify_init1")
        check(self.libc.inotify_add_watch(self.fd, path.encode(), 0x20 | 0x10) >= 0,
              "inotify_add_watch %s" % path)

    def opened(self):
        try:
            return len(os.read(self.fd, 4096)) > 0
        except BlockingIOError:
            return False

    def close(self):
        os.close(self.fd)


def chardev(path):
    """A character device node with /dev/null's numbers (a stand-in for /dev/watchdog or a tape)."""
    import stat as st
    os.mknod(path, 0o600 | st.S_IFCHR, os.stat("/dev/null").st_rdev)
    return path


@case
def creds_device_node_never_opened(e):
    """A device node named as the credentials file (/dev/watchdog arms the watchdog on open, a tape
    rewinds on close) is refused by its type before anything opens it: inotify sees no open, both
    inside the credentials directory and outside it."""
    inside = chardev(os.path.join(e.chapdir, "watchdog"))
    outside = chardev(os.path.join(e.dir, "watchdog"))
    for p, words in ((inside, ("not a regular file", "a character device")),
                     ("watchdog", ("not a regular file",)),
                     (outside, ("credentials directory", e.chapdir))):
        w = OpenWatch(p if p.startswith("/") else inside)
        try:
            r = e.k.waitforattach("", e.opts(chapCredentialsFile=p))
            check(not w.opened(), "%s was opened" % p)
            failure(r, *words)
        finally:
            w.close()
    check(e.calls() == [], "iscsiadm ran: %r" % e.calls())


@case
def creds_outside_the_directory_refused(e):
    """Any path outside the credentials directory is refused without being looked at: the same
    message for a root-only 0600 credentials file, a file owned by someone else, a missing file and
    a directory, so a PV author learns nothing about the node's files (owner, mode, existence)."""
    good = e.creds("session.username = u\nsession.password = topsecret-1234\n", where=e.dir,
                   name="other-array.conf")
    other = e.creds("x", where=e.dir, name="nobody.conf")
    os.chown(other, 65534, 65534)
    msgs = []
    for p in (good, other, os.path.join(e.dir, "missing.conf"), e.dir, "/etc/shadow", "/dev/watchdog",
              os.path.dirname(e.chapdir.rstrip("/")) + "/chapx/y.conf"):
        r = e.k.waitforattach("", e.opts(chapCredentialsFile=p))
        failure(r, "credentials directory", e.chapdir)
        m = r["message"]
        check(m.endswith("'%s'" % p), "the message ends with the option: %r" % m)
        m = m[:-len(p) - 2]
        for leak in ("uid", "mode", "exist", "No such", "regular", "directory '<P>'", "symlink",
                     "permission", "Permission"):
            check(leak not in m, "message reveals %r: %r" % (leak, r["message"]))
        msgs.append(m)
    check(len(set(msgs)) == 1, "messages differ by what the path is: %r" % msgs)
    check(e.calls() == [], "iscsiadm ran: %r" % e.calls())


@case
def creds_symlinks_in_the_directory_refused(e):
    """Opened beneath the directory literally: a symlink (to a file inside or outside) and a
    symlinked subdirectory are refused; a real subdirectory's file is read."""
    real = e.creds("session.username = u\nsession.password = topsecret-1234\n", name="real.conf")
    outside = e.creds("session.username = u\nsession.password = topsecret-1234\n", where=e.dir,
                      name="outside.conf")
    os.symlink("real.conf", os.path.join(e.chapdir, "alias.conf"))
    os.symlink(outside, os.path.join(e.chapdir, "out.conf"))
    os.symlink(e.dir, os.path.join(e.chapdir, "sub"))
    for p in ("alias.conf", "out.conf", "sub/outside.conf", os.path.join(e.chapdir, "sub/outside.conf")):
        r = creds_refused(e, p, "symlink")
        check(e.dir + "/outside" not in r["message"], "the target is named: %r" % r)
    os.mkdir(os.path.join(e.chapdir, "array1"), 0o700)
    e.creds("session.username = u\nsession.password = topsecret-1234\n", where=os.path.join(e.chapdir, "array1"))
    for p in ("array1/chap.conf", os.path.join(e.chapdir, "array1/chap.conf"), real):
        r = e.k.waitforattach("", e.opts(chapCredentialsFile=p))
        failure(r, "did not appear")  # read, logged in (fake iscsiadm); no device on the host


@case
def creds_directory_must_be_root_only(e):
    """A credentials directory that others may write (plant files in) is refused."""
    p = e.creds("session.username = u\nsession.password = topsecret-1234\n")
    os.chmod(e.chapdir, 0o777)
    creds_refused(e, p, "credentials directory", "writable")
    os.chmod(e.chapdir, 0o700)
    os.chown(e.chapdir, 65534, 65534)
    creds_refused(e, p, "credentials directory", "owned by uid 65534")
    os.chown(e.chapdir, 0, 0)


@case
def creds_fifo_does_not_hang(e):
    """A FIFO as credentials file fails at once (nobody writes it)."""
    p = os.path.join(e.chapdir, "fifo.conf")
    os.mkfifo(p, 0o600)
    t = time.monotonic()
    creds_refused(e, p, "not a regular file")
    check(time.monotonic() - t < 10, "took %.1f s" % (time.monotonic() - t))


@case
def creds_passed_to_iscsiadm_never_logged(e):
    """Discovery and session CHAP reach iscsiadm on argv; the log shows *** instead."""
    p = e.creds("# node-local CHAP\n  discovery.username = disc-user\ndiscovery.password = disc-secret-4321\n"
                "session.username = sess-user\t\nsession.password = sess-secret-8765\n"
                "session.username_in = tgt-user\nsession.password_in = mutual-secret-999\n")
    r = e.k.waitforattach("", e.opts(chapCredentialsFile=p))
    failure(r, "did not appear")  # no kernel initiator on the host: no device
    calls = e.calls()
    flat = [x for c in calls for x in c]
    for s in ("disc-secret-4321", "sess-secret-8765", "mutual-secret-999"):
        check(s in flat, "%s not passed to iscsiadm: %r" % (s, calls))
        check(s not in e.logtext(), "%s is in the driver log" % s)
        check(s not in r["message"], "%s is in the reply" % s)
    check("sess-user" in flat and "tgt-user" in flat, "user names not passed")
    check("***" in e.logtext(), "redacted argv not logged")
    # the order: discovery record with CHAP, discover, node update with CHAP, login
    calls = [c for c in calls if not is_query(c)]
    kinds = [("discoverydb" in c and "new" in c, "--discover" in c,
              "node.session.auth.authmethod" in c and "CHAP" in c, "--login" in c) for c in calls]
    check(kinds[0][0] and kinds[2][1] and kinds[5][2] and kinds[6][3], "call order %r" % calls)
    upd = calls[1]
    check(upd[upd.index("discovery.sendtargets.auth.password") + 2] == "disc-secret-4321", "discovery pw")


def is_query(c):
    """a look at open-iscsi's database (does a record exist?), not a change"""
    return "-o" not in c and "--login" not in c and "--logout" not in c and "--discover" not in c \
        and "--rescan" not in c


def changes_of(calls, mode):
    return [c for c in calls if c[:2] == ["-m", mode] and "-o" in c and c[c.index("-o") + 1] in
            ("new", "update", "delete")]


@case
def admin_discovery_record_left_alone(e):
    """An administrator's discovery record for the portal is used as it is: never created over,
    updated (our discovery CHAP is not written into it) or deleted (issue 17 point 5)."""
    e.scenario(rules=[])
    with open(os.path.join(e.fake, "scenario.json")) as f:
        sc = json.load(f)
    sc["db"] = [["discoverydb", "", PORTAL]]
    with open(os.path.join(e.fake, "scenario.json"), "w") as f:
        json.dump(sc, f)
    p = e.creds("discovery.username = du\ndiscovery.password = disc-secret-4321\n")
    r = e.k.waitforattach("", e.opts(chapCredentialsFile=p))
    failure(r, "did not appear")  # discovered and logged in (fake); no device on the host
    calls = e.calls()
    check(any("--discover" in c for c in calls), "no discovery: %r" % calls)
    check(changes_of(calls, "discoverydb") == [], "the administrator's discovery record was "
          "changed: %r" % changes_of(calls, "discoverydb"))
    check("disc-secret-4321" not in [x for c in calls for x in c], "our secret went into it")


@case
def admin_node_record_not_touched(e):
    """A node record for (target, portal, iface) that flexvol did not create is the
    administrator's: a clear Failure, and it is neither updated nor deleted (issue 17 point 5)."""
    e.scenario(rules=[])
    with open(os.path.join(e.fake, "scenario.json")) as f:
        sc = json.load(f)
    sc["db"] = [["node", IQN, PORTAL, "default"]]
    with open(os.path.join(e.fake, "scenario.json"), "w") as f:
        json.dump(sc, f)
    r = e.k.waitforattach("", e.opts())
    failure(r, "did not create", "neither changes nor deletes")
    ch = changes_of(e.calls(), "node")
    check(ch == [], "the administrator's node record was changed: %r" % ch)
    check(not any("--login" in c for c in e.calls()), "logged in with it")


@case
def discovery_serialised_per_portal(e):
    """Two targets behind one portal: their discoveries (keyed by portal in open-iscsi) never
    overlap, although the two calls hold different target locks (issue 17 point 5)."""
    iqn2 = IQN + "-b"
    e.scenario(targets=[IQN, iqn2], rules=[{"kind": "discover", "sleep": 1.0,
                                            "out": "%s,1 %s\n%s,1 %s\n" % (PORTAL, IQN, PORTAL, iqn2)}])
    o1, o2 = e.opts(), e.opts(vol="pv2", iqn=iqn2)
    ps = [e.drv.spawn("waitforattach", "", o) for o in (o1, o2)]
    for p in ps:
        p.communicate(timeout=60)
    spans = []
    with open(os.path.join(e.fake, "spans")) as f:
        spans = sorted((s[2], s[3]) for s in map(json.loads, f) if s[0] == "discover")
    check(len(spans) == 2, "two discoveries: %r" % spans)
    check(spans[0][1] <= spans[1][0], "the discoveries overlapped: %r" % spans)


# --- iscsiadm error mapping (fake iscsiadm) ---------------------------------------------

def login_fails(e, rules, *words, opts=None):
    e.scenario(rules=rules)
    r = e.k.waitforattach("", opts or e.opts())
    failure(r, "login to '%s' failed" % IQN, *words)
    return r


@case
def map_connection_refused(e):
    login_fails(e, [{"kind": "discover", "rc": 4,
                     "out": "iscsiadm: cannot make connection to 127.0.0.1: Connection refused\n"}],
                PORTAL, "cannot connect to the portal", "iscsiadm status 4", "Connection refused")


@case
def map_pdu_timeout(e):
    login_fails(e, [{"kind": "discover", "rc": 11,
                     "out": "iscsiadm: cannot make connection to 127.0.0.1: Connection refused\n"
                            "iscsiadm: connection login retries (reopen_max) 5 exceeded\n"}],
                "did not answer", "status 11")


@case
def map_chap_failure(e):
    login_fails(e, [{"kind": "login", "rc": 24,
                     "out": "Logging in to [iface: default, target: x, portal: 127.0.0.1,3260]\n"
                            "iscsiadm: Could not login to [iface: default].\n"
                            "iscsiadm: initiator reported error (24 - iSCSI login failed due to "
                            "authorization failure)\niscsiadm: Could not log into all portals\n"}],
                "CHAP authentication failed", "initiator reported error (24")


@case
def map_discovery_chap_failure(e):
    login_fails(e, [{"kind": "discover", "rc": 24}], "discovery CHAP authentication failed")


@case
def map_fatal_login(e):
    login_fails(e, [{"kind": "login", "rc": 19}], "refused the login")


@case
def map_no_transport_and_no_iscsid(e):
    login_fails(e, [{"kind": "discover", "rc": 12}], "iscsi_tcp")
    login_fails(e, [{"kind": "discover", "rc": 20, "out": "iscsiadm: can not connect to iSCSI daemon (111)!\n"}],
                "iscsid is not running", "can not connect to iSCSI daemon")


@case
def map_target_not_offered(e):
    e.scenario(targets=["iqn.2024-01.io.other:t"])
    r = e.k.waitforattach("", e.opts())
    failure(r, "does not offer target '%s'" % IQN)
    check(not any("--login" in c for c in e.calls()), "logged in to a target not offered")


@case
def already_logged_in_is_success(e):
    """login exit 15 (session exists) is success: what fails next is the device wait."""
    e.scenario(rules=[{"kind": "login", "rc": 15,
                       "out": "iscsiadm: default: 1 session requested, but 1 already present.\n"}])
    r = e.k.waitforattach("", e.opts())
    failure(r, "did not appear", "LUN 1 of '%s' has no disk" % IQN)
    check("login" not in r["message"], "15 treated as a login failure: %r" % r)


@case
def helper_deadline(e):
    """A hung iscsiadm is killed at the helper deadline; the call fails in time."""
    e.env["FLEXVOL_HELPER_TIMEOUT"] = "2"
    e.scenario(rules=[{"kind": "login", "sleep": 60}])
    t = time.monotonic()
    r = e.k.waitforattach("", e.opts())
    dt = time.monotonic() - t
    failure(r, "iscsiadm did not finish within 2 s")
    check(dt < 10, "took %.1f s" % dt)
    time.sleep(0.2)
    left = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open("/proc/%s/cmdline" % p, "rb") as f:
                    if e.fake.encode() in f.read():
                        left.append(p)
            except OSError:
                pass
    check(not left, "fake iscsiadm still running: %r" % left)


@case
def login_phase_deadline(e):
    """Hanging portals share one budget (4 helper deadlines): later ones are not tried."""
    e.env["FLEXVOL_HELPER_TIMEOUT"] = "1"
    e.scenario(rules=[{"kind": "discover", "sleep": 60}])
    portals = ",".join("127.0.0.%d" % i for i in range(2, 9))
    t = time.monotonic()
    r = e.k.waitforattach("", e.opts(portals=portals))
    dt = time.monotonic() - t
    failure(r, "did not finish within 1 s", "gave up after 4 s before trying")
    tried = [c for c in e.calls() if "--discover" in c]
    # 4 when each try takes its 1 s; fewer when a loaded machine adds to every fork, exec and
    # kill (CI saw 3): what the budget promises is that the 7th portal is never reached
    check(2 <= len(tried) <= 5, "portals tried: %d" % len(tried))
    check(dt < 9, "took %.1f s" % dt)


@case
def portal_failover_order(e):
    """targetPortal first, then each of 'portals' in order, until one logs in."""
    e.scenario(rules=[{"kind": "discover", "arg": "127.0.0.1:3260", "rc": 4},
                      {"kind": "discover", "arg": "127.0.0.2:3260", "rc": 8}])
    r = e.k.waitforattach("", e.opts(portals="127.0.0.2,127.0.0.3:3261"))
    failure(r, "did not appear")  # logged in via the third portal; no device on the host
    disc = [c[c.index("-p") + 1] for c in e.calls() if "--discover" in c]
    check(disc == ["127.0.0.1:3260", "127.0.0.2:3260", "127.0.0.3:3261"], "discovery order %r" % disc)
    logins = [c for c in e.calls() if "--login" in c]
    check(len(logins) == 1 and "127.0.0.3:3261" in logins[0], "login %r" % logins)
    # all portals failing: every reason in the message
    e.scenario(rules=[{"kind": "discover", "rc": 4}])
    r = e.k.waitforattach("", e.opts(portals="127.0.0.2"))
    failure(r, "127.0.0.1:3260: cannot connect", "127.0.0.2:3260: cannot connect")


@case
def node_record_settings(e):
    """Node records get manual startup and authmethod None without credentials; the
    portal used is the one the target advertises."""
    e.scenario(targets=[IQN])
    e.k.waitforattach("", e.opts(iface="iface0"))
    upd = [c for c in e.calls() if "update" in c][0]
    check(upd[upd.index("node.startup") + 2] == "manual", "%r" % upd)
    check(upd[upd.index("node.session.auth.authmethod") + 2] == "None", "%r" % upd)
    check(upd[upd.index("-I") + 1] == "iface0", "%r" % upd)
    check(all(c[c.index("-I") + 1] == "iface0" for c in e.calls() if "-I" in c), "iface not passed")


# --- open-iscsi's database: nothing of ours left behind (issue 9 item 7) ----------------

def mode(c):
    return c[c.index("-m") + 1] if "-m" in c else ""


def op(c):
    return c[c.index("-o") + 1] if "-o" in c else ""


@case
def discovery_is_nonpersistent(e):
    """Discovery writes no node record for every advertised target and no discovery
    record; exactly one node record, ours, is created ("-o new") before it is set up."""
    e.scenario(targets=["iqn.2024-01.io.other:t", IQN, "iqn.2024-01.io.other:u"])
    e.k.waitforattach("", e.opts(iface="iface0"))
    calls = e.calls()
    disc = [c for c in calls if "--discover" in c or mode(c) == "discovery"]
    check(len(disc) == 1, "discoveries %r" % calls)
    check(mode(disc[0]) == "discoverydb" and op(disc[0]) == "nonpersistent", "persistent discovery %r" % disc)
    check(not any(mode(c) == "discoverydb" and op(c) == "new" for c in calls), "discovery record made %r" % calls)
    new = [c for c in calls if mode(c) == "node" and op(c) == "new"]
    check(len(new) == 1 and new[0][new[0].index("-T") + 1] == IQN and new[0][new[0].index("-p") + 1] == PORTAL
          and new[0][new[0].index("-I") + 1] == "iface0", "node record creation %r" % calls)
    i_new, i_upd = calls.index(new[0]), [i for i, c in enumerate(calls) if op(c) == "update"][0]
    check(i_new < i_upd, "update before the record exists %r" % calls)
    check(all(IQN in c for c in calls if mode(c) == "node"), "another target's node record touched %r" % calls)


@case
def discovery_chap_record_deleted(e):
    """The discovery record that carries discovery CHAP is deleted after the discovery,
    whether it succeeded or failed."""
    p = e.creds("discovery.username = du\ndiscovery.password = disc-secret-4321\n")
    for rules in ([], [{"kind": "discover", "rc": 24}], [{"kind": "update", "rc": 6}]):
        e.scenario(rules=rules)
        try:
            os.unlink(os.path.join(e.fake, "calls"))
        except OSError:
            pass
        e.k.waitforattach("", e.opts(chapCredentialsFile=p))
        calls = e.calls()
        mk = [i for i, c in enumerate(calls) if mode(c) == "discoverydb" and op(c) == "new"]
        rm = [i for i, c in enumerate(calls) if mode(c) == "discoverydb" and op(c) == "delete"]
        check(len(mk) == 1 and len(rm) == 1 and mk[0] < rm[0], "%r: record not deleted: %r" % (rules, calls))
        later = [c for c in calls[rm[0]:] if mode(c) == "discoverydb" and op(c) in ("new", "update")]
        check(not later, "recreated %r" % calls)
        disc = [i for i, c in enumerate(calls) if "--discover" in c]
        check(all(i < rm[0] for i in disc), "discovery after the delete %r" % calls)


@case
def failed_login_deletes_node_record(e):
    """A login that fails (bad CHAP) deletes the node record it made: no secret stays."""
    p = e.creds("session.username = su\nsession.password = sess-secret-8765\n")
    e.scenario(rules=[{"kind": "login", "rc": 24}])
    failure(e.k.waitforattach("", e.opts(chapCredentialsFile=p)), "CHAP authentication failed")
    calls = e.calls()
    login = [i for i, c in enumerate(calls) if "--login" in c][0]
    rm = [c for c in calls[login:] if mode(c) == "node" and op(c) == "delete"]
    check(len(rm) == 1 and rm[0][rm[0].index("-T") + 1] == IQN and rm[0][rm[0].index("-p") + 1] == PORTAL,
          "node record not deleted: %r" % calls)


# --- node-side ops without a session -------------------------------------------------

@case
def no_session_answers(e):
    k = e.k
    # isattached reports the logical attach (attach succeeded, no detach yet), on any node
    check(k.isattached(e.opts(), expect="Success")["attached"] is True, "this node")
    check(k.isattached(e.opts(), node="other-node", expect="Success")["attached"] is True, "other node")
    failure(k.mount("pod-a", "pv1", e.opts()), "not mounted on this node")
    failure(k.expandfs(e.opts(), "/dev/sdz", "pod-a", "pv1", 2 << 20, 1 << 20), "not attached")
    k.unmount("pod-a", "pv1", expect="Success")
    k.unmountdevice("pv1", expect="Success")
    k.detach("pv1", expect="Success")
    k.detach("pv1", node="other-node", expect="Success")
    check(e.calls() == [], "iscsiadm ran: %r" % e.calls())



# --- directory arguments taken literally (issue 9 item 4) ---------------------------

@case
def dirs_taken_literally(e):
    """mountdevice into a missing or symlinked global path is refused before iscsiadm runs and
    creates nothing; unmount/unmountdevice through a symlink leave the foreign mount behind it."""
    import subprocess
    from flexsim import mounted_at
    o = e.opts()
    g = e.k.gmp("pv1")
    r = e.drv.call("mountdevice", g, "/dev/sdx", o, expect="Failure")
    failure(r, "does not exist")
    check(not os.path.exists(g), "mountdevice created the global path")
    e.drv.call("unmountdevice", g, expect="Success")
    foreign = os.path.join(e.dir, "foreign")
    os.makedirs(foreign)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "foreign", foreign], check=True)
    os.makedirs(os.path.dirname(g))
    os.symlink(foreign, g)
    pd = e.k.poddir("pod-a", "pv1")
    os.makedirs(os.path.dirname(pd))
    os.symlink(foreign, pd)
    # (mount looks for the LUN first: without one it fails before the directory matters)
    for op, args in (("mountdevice", (g, "/dev/sdx", o)), ("unmountdevice", (g,)), ("unmount", (pd,)),
                     ("unmount", ("/proc/self/root" + foreign,))):
        failure(e.drv.call(op, *args), "symlink or magic link")
        check(len(mounted_at(foreign)) == 1, "%s: the foreign mount is gone" % op)
    check(e.calls() == [], "iscsiadm ran: %r" % e.calls())
    subprocess.run(["umount", foreign], check=True)


def make_env(build, name):
    return Env(build, name)
