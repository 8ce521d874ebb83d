#!/usr/bin/env python3
"""The iscsi driver against the real target of the VM lane (tgt + open-iscsi + udev).

Run inside the guest by the tests/vm/t-iscsi-* wrappers, one case each:

  tests/vm/iscsi_driver.py CASE      (lifecycle, two_luns, chap, chap_failure, records,
                                      wrong_portal, expand, sigkill_login, stale_db_lock,
                                      state_wiped)

Every driver call goes through tests/sim/flexsim.py, so each one is also checked
against the kubelet contract (one JSON object on combined output, nothing on
stderr, exit code matching the status).  Latencies (waitforattach: login to
device node, as the driver logs it, and the whole call; unmountdevice) are
appended to $FV_BUILD/vm-iscsi-latency.txt.
"""
import base64
import glob
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WS = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(WS, "tests", "sim"))
from flexsim import Driver, Kubelet, in_parallel, mounted_at, mounts_under  # noqa: E402

FACTS = "/run/flexvol-vm/fixtures.env"


class Fail(AssertionError):
    pass


def check(cond, what):
    if not cond:
        raise Fail(what)


def log(msg):
    print("[%6.2f] %s" % (time.monotonic() - T0, msg), flush=True)


T0 = time.monotonic()


def facts():
    out = {}
    with open(FACTS) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#") or "=" not in line:
                continue
            k, v = line.split("=", 1)
            out[k] = shlex.split(v)[0] if v else ""
    return out


def run(*argv, check_rc=True):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if check_rc and p.returncode != 0:
        raise Fail("%s: exit %d: %s" % (" ".join(argv), p.returncode, p.stdout.strip()))
    return p


# --- the kernel's view -----------------------------------------------------------

def sessions(iqn):
    """sids of the sessions to @iqn (sysfs)."""
    out = []
    for d in glob.glob("/sys/class/iscsi_session/session*"):
        try:
            with open(d + "/targetname") as f:
                if f.read().strip() == iqn:
                    out.append(int(d.rsplit("session", 1)[1]))
        except OSError:
            pass
    return sorted(out)


def lun_disks(iqn, lun):
    """/dev/sdX of LUN @lun on every session to @iqn."""
    out = []
    for sid in sessions(iqn):
        for b in glob.glob("/sys/class/iscsi_session/session%d/device/target*/*:*:*:%d/block/*" % (sid, lun)):
            out.append("/dev/" + os.path.basename(b))
    return out


def node_records():
    """(target, portal) of every node record in open-iscsi's database."""
    out = []
    for line in run("iscsiadm", "-m", "node", check_rc=False).stdout.splitlines():
        m = re.match(r"^(\S+),-?\d+ (\S+)$", line.strip())
        if m:
            out.append((m.group(2), m.group(1)))
    return sorted(out)


def discovery_records():
    """the lines of 'iscsiadm -m discoverydb' ("<portal> via sendtargets")."""
    p = run("iscsiadm", "-m", "discoverydb", check_rc=False)
    return sorted(l.strip() for l in p.stdout.splitlines() if " via " in l)


ISCSI_DB_DIRS = ("/etc/iscsi", "/var/lib/iscsi")


def files_containing(secret):
    """files under open-iscsi's database directories whose bytes contain @secret."""
    hits = []
    for top in ISCSI_DB_DIRS:
        for d, _, files in os.walk(top):
            for n in files:
                p = os.path.join(d, n)
                try:
                    with open(p, "rb") as f:
                        if secret.encode() in f.read():
                            hits.append(p)
                except OSError:
                    pass
    return hits


def size_of(dev):
    with open("/sys/class/block/%s/size" % os.path.basename(dev)) as f:
        return int(f.read()) * 512


def fs_size(path):
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize


def settle():
    run("udevadm", "settle", "--timeout=30", check_rc=False)


class Case:
    def __init__(self, name):
        self.name = name
        self.f = facts()
        self.build = os.environ.get("FV_BUILD", os.path.join(WS, "build"))
        if not os.path.isabs(self.build):
            self.build = os.path.join(WS, self.build)
        self.dir = tempfile.mkdtemp(prefix="iscsi-%s." % name, dir="/tmp")
        self.state = os.path.join(self.dir, "state")
        self.logfile = os.path.join(self.dir, "iscsi.log")
        self.env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "FLEXVOL_CONFIG": "/dev/null",
                    "FLEXVOL_STATE_DIR": self.state, "FLEXVOL_RUN_DIR": os.path.join(self.dir, "run"),
                    "FLEXVOL_LOG_FILE": self.logfile, "FLEXVOL_HELPER_TIMEOUT": "30",
                    "FLEXVOL_DEVICE_TIMEOUT": "30", "FLEXVOL_CHAP_DIR": self.dir}
        self.drv = Driver(os.path.join(self.build, "iscsi"), self.env, timeout=200)
        self.node = os.uname().nodename
        self.k = Kubelet(self.drv, os.path.join(self.dir, "kubelet"), self.node)
        self.portal = self.f["FV_ISCSI_PORTAL"]
        self.iqn1 = self.f["FV_ISCSI_IQN1"]
        self.iqn2 = self.f["FV_ISCSI_IQN2"]
        self.targets = {self.iqn1, self.iqn2}
        self.extra_cleanup = []
        self.hide = []      # secret values a failure's output must not show

    def opts(self, vol, iqn=None, lun=1, ro=False, fstype="ext4", **user):
        u = {"targetPortal": self.portal, "iqn": iqn or self.iqn1, "lun": str(lun)}
        u.update(user)
        return self.k.options(vol, u, fstype=fstype, ro=ro)

    def ok(self, r):
        check(r.status == "Success", "%r" % r)
        return r

    def bring_up(self, vol, opts, uids=("pod-a",)):
        k = self.k
        a = self.ok(k.attach(opts))
        t = time.monotonic()
        w = self.ok(k.waitforattach(a["device"], opts))
        wfa = time.monotonic() - t
        dev = w.get("device", "")
        check(dev.startswith("/dev/sd") and os.path.exists(dev), "waitforattach device %r" % dev)
        self.ok(k.mountdevice(vol, dev, opts))
        for uid in uids:
            self.ok(k.mount(uid, vol, opts))
        return dev, wfa

    def tear_down(self, vol, uids=("pod-a",), detach=True):
        k = self.k
        for uid in uids:
            self.ok(k.unmount(uid, vol))
        t = time.monotonic()
        self.ok(k.unmountdevice(vol))
        umd = time.monotonic() - t
        if detach:
            self.ok(k.detach(vol))
        return umd

    def driver_latency(self):
        """The driver's own 'login to device node' numbers from its log (ms)."""
        out = []
        try:
            with open(self.logfile) as f:
                for line in f:
                    m = re.search(r"latency: login (\d+) ms, login to device node (\d+) ms", line)
                    if m:
                        out.append((int(m.group(1)), int(m.group(2))))
        except OSError:
            pass
        return out

    def record(self, what, seconds):
        line = "%s %s %.3f s\n" % (self.name, what, seconds)
        log("latency: " + line.strip())
        try:
            with open(os.path.join(self.build, "vm-iscsi-latency.txt"), "a") as f:
                f.write(line)
        except OSError:
            pass

    def no_secret_logged(self, secret):
        with open(self.logfile) as f:
            text = f.read()
        check(secret not in text, "the CHAP secret appears in the driver log")

    def cleanup_records(self):
        for t, p in node_records():
            run("iscsiadm", "-m", "node", "-T", t, "-p", p, "-o", "delete", check_rc=False)
        for line in discovery_records():
            run("iscsiadm", "-m", "discoverydb", "-t", "sendtargets", "-p", line.split()[0], "-o", "delete",
                check_rc=False)

    def cleanup(self):
        for m in sorted({m[0] for m in mounts_under(self.dir)}, key=len, reverse=True):
            run("umount", "-l", m, check_rc=False)
        for fn in self.extra_cleanup:
            for iqn in self.targets:
                for sid in sessions(iqn):
                    run("iscsiadm", "-m", "session", "-r", str(sid), "--logout", check_rc=False)
            fn()
        for iqn in self.targets:
            for sid in sessions(iqn):
                run("iscsiadm", "-m", "session", "-r", str(sid), "--logout", check_rc=False)
            run("iscsiadm", "-m", "node", "-T", iqn, "-o", "delete", check_rc=False)
        run("iscsiadm", "-m", "discoverydb", "-t", "sendtargets", "-p", self.portal, "-o", "delete",
            check_rc=False)
        settle()
        shutil.rmtree(self.dir, ignore_errors=True)

    def redact(self, text):
        for v in self.hide:
            for form in (v, base64.b64encode(v.encode()).decode()):
                text = text.replace(form, "<a secret value>")
        return text

    def dump_log(self):
        try:
            with open(self.logfile) as f:
                lines = f.readlines()
            print("--- last lines of the driver log")
            sys.stdout.writelines(self.redact(x) for x in lines[-40:])
        except OSError:
            pass


# --- cases -----------------------------------------------------------------------

def lifecycle(c):
    """The whole kubelet flow twice, every call twice; data survives; nothing left."""
    k, vol = c.k, "pv-life"
    opts = c.opts(vol)
    r = c.ok(k.init())
    check(r["capabilities"]["attach"] is True, "init: attach capability")
    # the logical attach: true from attach on, whether or not waitforattach ran (issue 10)
    check(c.ok(k.isattached(opts))["attached"], "isattached before waitforattach")
    uuid = None
    for rnd in (1, 2):
        a1, a2 = c.ok(k.attach(opts)), c.ok(k.attach(opts))
        check(a1["device"] == a2["device"] ==
              "/dev/disk/by-path/ip-%s-iscsi-%s-lun-1" % (c.portal, c.iqn1), "attach handle %r" % a1)
        t = time.monotonic()
        w = c.ok(k.waitforattach(a1["device"], opts))
        c.record("waitforattach-call", time.monotonic() - t)
        dev = w["device"]
        check(lun_disks(c.iqn1, 1) == [dev], "LUN 1 disk %r vs %r" % (lun_disks(c.iqn1, 1), dev))
        settle()
        check(os.path.realpath(a1["device"]) == dev, "by-path link resolves to %s" % dev)
        t = time.monotonic()
        check(c.ok(k.waitforattach(a1["device"], opts))["device"] == dev, "waitforattach again")
        c.record("waitforattach-again-call", time.monotonic() - t)
        check(c.ok(k.isattached(opts))["attached"], "isattached after waitforattach")
        check(c.ok(k.isattached(opts, node="other-node"))["attached"], "isattached, other node")
        check(len(sessions(c.iqn1)) == 1, "one session: %r" % sessions(c.iqn1))
        c.ok(k.mountdevice(vol, dev, opts))
        c.ok(k.mountdevice(vol, dev, opts))
        # mounted already: another filesystem is refused, not answered Success; a read-only
        # request on the read-write device mount is Success and changes nothing (read-only is
        # each pod's bind's, issue 17 point 8; docs/design.md)
        c.ok(k.mountdevice(vol, dev, c.opts(vol, ro=True)))
        gm = mounted_at(k.gmp(vol))
        check(len(gm) == 1 and "rw" in gm[0][3].split(","), "ro request changed the device mount: %r" % gm)
        r = k.mountdevice(vol, dev, c.opts(vol, fstype="xfs"))
        check(r.status == "Failure" and "mounted as ext4, not the requested xfs" in r["message"], "xfs: %r" % r)
        gm = mounted_at(k.gmp(vol))
        check(len(gm) == 1 and gm[0][2] == "ext4", "global mount %r" % gm)
        for uid in ("pod-a", "pod-b"):
            c.ok(k.mount(uid, vol, opts))
            c.ok(k.mount(uid, vol, opts))
        pa = os.path.join(k.poddir("pod-a", vol), "data.txt")
        if rnd == 1:
            with open(pa, "w") as f:
                f.write("round 1\n")
                f.flush()
                os.fsync(f.fileno())
            uuid = run("blkid", "-s", "UUID", "-o", "value", dev).stdout.strip()
        else:
            with open(pa) as f:
                check(f.read() == "round 1\n", "data of round 1")
            check(run("blkid", "-s", "UUID", "-o", "value", dev).stdout.strip() == uuid, "reformatted?")
        for uid in ("pod-a", "pod-b"):
            c.ok(k.unmount(uid, vol))
            c.ok(k.unmount(uid, vol))
            check(not os.listdir(k.poddir(uid, vol)), "pod dir not empty")
        t = time.monotonic()
        c.ok(k.unmountdevice(vol))
        c.record("unmountdevice-call", time.monotonic() - t)
        c.ok(k.unmountdevice(vol))
        check(not mounted_at(k.gmp(vol)), "global path still mounted")
        check(not sessions(c.iqn1), "session left after unmountdevice: %r" % sessions(c.iqn1))
        c.ok(k.detach(vol))
        c.ok(k.detach(vol))
        settle()
        check(not os.path.exists(a1["device"]), "by-path link left after logout")
        log("round %d ok (%s)" % (rnd, dev))
    for lo, dn in c.driver_latency():
        c.record("driver-login", lo / 1000.0)
        c.record("driver-login-to-device-node", dn / 1000.0)


def two_luns(c):
    """LUN 1 and LUN 2 of one target: one session; tearing one down keeps the other usable."""
    k = c.k
    oa, ob = c.opts("pv-a", lun=1), c.opts("pv-b", lun=2)
    da, _ = c.bring_up("pv-a", oa)
    db, _ = c.bring_up("pv-b", ob)
    check(da != db, "two LUNs, one device: %s" % da)
    check(len(sessions(c.iqn1)) == 1, "sessions %r" % sessions(c.iqn1))
    sid = sessions(c.iqn1)[0]
    umd = c.tear_down("pv-a")
    c.record("unmountdevice-call-sibling-in-use", umd)
    check(sessions(c.iqn1) == [sid], "the session went with LUN 1: %r" % sessions(c.iqn1))
    check(lun_disks(c.iqn1, 2) == [db], "LUN 2 disk gone")
    p = os.path.join(k.poddir("pod-a", "pv-b"), "still.txt")
    with open(p, "w") as f:
        f.write("x" * 4096)
        f.flush()
        os.fsync(f.fileno())
    check(c.ok(k.isattached(ob))["attached"], "pv-b attached")
    check(lun_disks(c.iqn1, 1) == [], "LUN 1 disk left behind: %r" % lun_disks(c.iqn1, 1))
    # pv-a comes back while pv-b is in use: the session is reused
    da2, _ = c.bring_up("pv-a", oa, uids=("pod-c",))
    check(sessions(c.iqn1) == [sid], "a second session: %r" % sessions(c.iqn1))
    c.tear_down("pv-a", uids=("pod-c",))
    c.tear_down("pv-b")
    check(not sessions(c.iqn1), "session left after the last LUN: %r" % sessions(c.iqn1))


def write_creds(c, text, mode=0o600):
    path = os.path.join(c.dir, "chap.conf")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    os.write(fd, text.encode())
    os.close(fd)
    os.chmod(path, mode)
    return path


def chap(c):
    """Target 2 requires CHAP: the credentials file logs in; the secret is never logged."""
    k, vol = c.k, "pv-chap"
    secret = c.f["FV_ISCSI_CHAP_SECRET"]
    path = write_creds(c, "# target 2\nsession.username = %s\nsession.password = %s\n"
                       % (c.f["FV_ISCSI_CHAP_USER"], secret))
    opts = c.opts(vol, iqn=c.iqn2, chapCredentialsFile=path)
    # refused when group/world readable, before any login
    os.chmod(path, 0o640)
    r = k.waitforattach("", opts)
    check(r.status == "Failure" and "mode 0640" in r["message"], "mode 0640 accepted: %r" % r)
    check(not sessions(c.iqn2), "session after a refused credentials file")
    os.chmod(path, 0o600)
    dev, wfa = c.bring_up(vol, opts)
    c.record("waitforattach-call-chap", wfa)
    check(len(sessions(c.iqn2)) == 1, "CHAP session %r" % sessions(c.iqn2))
    c.tear_down(vol)
    check(not sessions(c.iqn2), "session left: %r" % sessions(c.iqn2))
    c.no_secret_logged(secret)


def chap_failure(c):
    """A wrong CHAP secret: a clear Failure, no session left, the secret not logged."""
    k, vol = c.k, "pv-chapbad"
    bad = "not-the-secret-%d" % os.getpid()
    path = write_creds(c, "session.username = %s\nsession.password = %s\n" % (c.f["FV_ISCSI_CHAP_USER"], bad))
    opts = c.opts(vol, iqn=c.iqn2, chapCredentialsFile=path)
    t = time.monotonic()
    r = k.waitforattach("", opts)
    log("reply after %.1f s: %r" % (time.monotonic() - t, r))
    check(r.status == "Failure", "wrong secret accepted: %r" % r)
    check("CHAP authentication failed" in r["message"], "message: %r" % r["message"])
    check(bad not in r["message"], "the secret is in the message")
    check(not sessions(c.iqn2), "session left: %r" % sessions(c.iqn2))
    # and without credentials at all
    r = k.waitforattach("", c.opts(vol, iqn=c.iqn2))
    check(r.status == "Failure" and ("authentication" in r["message"] or "refused" in r["message"]), "no CHAP: %r" % r)
    check(not sessions(c.iqn2), "session left: %r" % sessions(c.iqn2))
    c.no_secret_logged(bad)


def records(c):
    """open-iscsi's database: while in use only our target's node record exists (the
    portal advertises two targets); after the last logout no node record, no discovery
    record and no CHAP secret under /etc/iscsi (guest-private: an overlay on the host's)."""
    k, vol = c.k, "pv-rec"
    secret = c.f["FV_ISCSI_CHAP_SECRET"]
    # a clean start, whatever earlier cases of this boot left
    c.cleanup_records()
    check(node_records() == [] and discovery_records() == [],
          "records before: %r %r" % (node_records(), discovery_records()))
    path = write_creds(c, "session.username = %s\nsession.password = %s\n"
                       % (c.f["FV_ISCSI_CHAP_USER"], secret))
    opts = c.opts(vol, iqn=c.iqn2, chapCredentialsFile=path)
    c.bring_up(vol, opts)
    log("in use: node records %r, discovery records %r" % (node_records(), discovery_records()))
    check([t for t, _ in node_records()] == [c.iqn2], "node records while in use: %r" % node_records())
    check(discovery_records() == [], "discovery records while in use: %r" % discovery_records())
    c.tear_down(vol)
    check(not sessions(c.iqn2), "session left: %r" % sessions(c.iqn2))
    check(node_records() == [], "node records after the last logout: %r" % node_records())
    check(discovery_records() == [], "discovery records after logout: %r" % discovery_records())
    check(files_containing(secret) == [], "the CHAP secret is on disk: %r" % files_containing(secret))
    # a failed login (wrong secret) leaves nothing either
    bad = "not-the-secret-%d" % os.getpid()
    path = write_creds(c, "session.username = %s\nsession.password = %s\n" % (c.f["FV_ISCSI_CHAP_USER"], bad))
    r = k.waitforattach("", c.opts(vol, iqn=c.iqn2, chapCredentialsFile=path))
    check(r.status == "Failure", "wrong secret accepted: %r" % r)
    check(node_records() == [] and discovery_records() == [],
          "records after a failed login: %r %r" % (node_records(), discovery_records()))
    check(files_containing(bad) == [], "the wrong secret is on disk: %r" % files_containing(bad))


def wrong_portal(c):
    """Nothing listens at the portal: Failure within the deadline; a good extra portal works."""
    k, vol = c.k, "pv-wrong"
    bad = c.f["FV_ISCSI_PORTAL_IP"] + ":3261"
    opts = c.opts(vol, targetPortal=bad)
    t = time.monotonic()
    r = k.waitforattach("", opts)
    dt = time.monotonic() - t
    log("reply after %.1f s: %r" % (dt, r))
    check(r.status == "Failure" and bad in r["message"], "wrong portal: %r" % r)
    check(dt < 2 * 30 + 10, "took %.1f s, the helper deadline is 30 s" % dt)
    check(not sessions(c.iqn1), "session left: %r" % sessions(c.iqn1))
    # a wrong target name at the right portal
    r = k.waitforattach("", c.opts(vol, iqn="iqn.2024-01.io.flexvol.test:nosuch"))
    check(r.status == "Failure" and "does not offer" in r["message"], "wrong iqn: %r" % r)
    # the first portal fails over to the next one listed in 'portals'
    opts = c.opts(vol, targetPortal=bad, portals=c.portal)
    dev, _ = c.bring_up(vol, opts)
    check(lun_disks(c.iqn1, 1) == [dev], "failover device")
    c.tear_down(vol)
    check(not sessions(c.iqn1), "session left: %r" % sessions(c.iqn1))


def tgt(*a):
    return run("tgtadm", "--lld", "iscsi", *a)


def tgt_try(*a):
    return run("tgtadm", "--lld", "iscsi", *a, check_rc=False).returncode == 0


def expand(c):
    """The LUN grows on the target; expandfs rescans and grows ext4 online."""
    k, vol = c.k, "pv-grow"
    iqn = "iqn.2024-01.io.flexvol.test:target-expand-%d" % os.getpid()
    tid = str(100 + os.getpid() % 100)
    img = os.path.join("/srv", "flexvol-expand-%d.img" % os.getpid())
    run("truncate", "-s", "64M", img)
    c.targets.add(iqn)
    tgt("--op", "new", "--mode", "target", "--tid", tid, "-T", iqn)
    try:
        tgt("--op", "new", "--mode", "logicalunit", "--tid", tid, "--lun", "1", "-b", img)
        tgt("--op", "bind", "--mode", "target", "--tid", tid, "-I", "ALL")
        opts = c.opts(vol, iqn=iqn)
        dev, _ = c.bring_up(vol, opts)
        pod = k.poddir("pod-a", vol)
        before = fs_size(pod)
        check(size_of(dev) == 64 << 20, "LUN size %d" % size_of(dev))
        # not grown yet: a clear Failure, nothing changed
        r = k.expandfs(opts, dev, "pod-a", vol, 128 << 20, 64 << 20)
        check(r.status == "Failure" and "grow the LUN on the target first" in r["message"], "%r" % r)
        # grow the LUN on the target: tgt reads the size when the LU is created, so the
        # LU is re-created; the filesystem is frozen meanwhile so no I/O hits the gap,
        # and tgt refuses to delete an LU with commands in flight ("still active")
        run("truncate", "-s", "128M", img)
        run("fsfreeze", "-f", k.gmp(vol))
        try:
            for i in range(100):
                if tgt_try("--op", "delete", "--mode", "logicalunit", "--tid", tid, "--lun", "1"):
                    break
                time.sleep(0.1)
            tgt("--op", "new", "--mode", "logicalunit", "--tid", tid, "--lun", "1", "-b", img)
        finally:
            run("fsfreeze", "-u", k.gmp(vol))
        c.ok(k.expandfs(opts, dev, "pod-a", vol, 128 << 20, 64 << 20))
        after = fs_size(pod)
        log("filesystem %d -> %d bytes" % (before, after))
        check(size_of(dev) == 128 << 20, "device size after expandfs %d" % size_of(dev))
        check(after > before + (48 << 20), "filesystem did not grow: %d -> %d" % (before, after))
        c.ok(k.expandfs(opts, dev, "pod-a", vol, 128 << 20, 64 << 20))
        c.tear_down(vol)
        check(not sessions(iqn), "session left")
    finally:
        for sid in sessions(iqn):
            run("iscsiadm", "-m", "session", "-r", str(sid), "--logout", check_rc=False)
        tgt("--op", "delete", "--mode", "target", "--tid", tid, "--force")
        os.unlink(img)


def login_children(iqn):
    """pids of running 'iscsiadm ... --login' for @iqn."""
    out = []
    for p in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            with open(p, "rb") as f:
                a = f.read().split(b"\0")
        except OSError:
            continue
        if a and a[0].endswith(b"iscsiadm") and b"--login" in a and iqn.encode() in a:
            out.append(int(p.split("/")[2]))
    return out


def sigkill_login(c):
    """SIGKILL of waitforattach during the login, then a retry: one session, one device."""
    k, vol = c.k, "pv-kill"
    opts = c.opts(vol)
    p = c.drv.spawn("waitforattach", "", opts)
    t_end = time.monotonic() + 60
    while not login_children(c.iqn1) and p.poll() is None and time.monotonic() < t_end:
        time.sleep(0.01)
    if p.poll() is not None:
        raise Fail("waitforattach ended before its login could be killed: %r" % (p.communicate(),))
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    log("killed waitforattach (pid %d) during 'iscsiadm --login'" % p.pid)
    if os.environ.get("FV_DEBUG_KILL"):
        log(run("sh", "-c", "ps -eo pid,ppid,stat,etime,args | grep -i iscsi; ls -la /run/lock/iscsi /var/lock/iscsi /etc/iscsi 2>&1", check_rc=False).stdout)
    w = c.ok(k.waitforattach("", opts))
    dev = w["device"]
    settle()
    check(len(sessions(c.iqn1)) == 1, "sessions after the retry: %r" % sessions(c.iqn1))
    check(lun_disks(c.iqn1, 1) == [dev], "LUN 1 disks %r, device %s" % (lun_disks(c.iqn1, 1), dev))
    c.ok(k.mountdevice(vol, dev, opts))
    c.ok(k.mount("pod-a", vol, opts))
    c.tear_down(vol)
    check(not sessions(c.iqn1), "session left: %r" % sessions(c.iqn1))


DB_LOCK = "/run/lock/iscsi/lock"          # open-iscsi's database lock: lock.write is a hard link
DB_LOCK_TAKEN = DB_LOCK + ".write"        # of lock while an iscsiadm (or iscsid) holds it


def stale_db_lock(c):
    """open-iscsi's database lock left taken by an iscsiadm killed while it held it (a SIGKILL of
    the driver kills its iscsiadm; stop 34's CI met it in sigkill_login): every later iscsiadm
    waits 30 s for it (and from open-iscsi 2.1.10 then fails), past the helper deadline. The
    driver removes a lock no living iscsiadm can hold and logs it; one that a running iscsiadm
    may hold (started before the lock was taken) is left alone."""
    k, vol = c.k, "pv-lock"
    opts = c.opts(vol)
    os.makedirs(os.path.dirname(DB_LOCK), exist_ok=True)
    open(DB_LOCK, "a").close()
    # a holder: a process named iscsiadm, started before the lock is taken
    fake = os.path.join(c.dir, "iscsiadm")
    shutil.copy("/bin/sleep", fake)
    holder = subprocess.Popen([fake, "120"])
    p = None
    try:
        time.sleep(1.5)
        os.link(DB_LOCK, DB_LOCK_TAKEN)
        time.sleep(6)  # older than the driver's staleness bound (5 s)
        p = c.drv.spawn("waitforattach", "", opts)
        time.sleep(4)
        if p.poll() is not None:
            raise Fail("waitforattach ended while the lock was held: %r" % (p.communicate(),))
        check(os.path.exists(DB_LOCK_TAKEN), "the lock of a running iscsiadm was removed")
        # the holder ends and releases the lock, as iscsiadm would: the waiting call goes on
        holder.kill()
        holder.wait()
        os.unlink(DB_LOCK_TAKEN)
        out, err = p.communicate(timeout=120)
        r = json.loads(out)
        check(r.get("status") == "Success", "waitforattach after the lock was released: %r" % r)
        p = None
        c.ok(k.mountdevice(vol, r["device"], opts))
        c.tear_down(vol, uids=())
        check(not sessions(c.iqn1), "session left: %r" % sessions(c.iqn1))
        # a holder killed a moment ago with the lock taken (sigkill_login's retry): the next
        # call waits until the lock is 5 s old, removes it, and goes on
        os.link(DB_LOCK, DB_LOCK_TAKEN)
        t = time.monotonic()
        dev = c.ok(k.waitforattach("", opts))["device"]
        took = time.monotonic() - t
        log("waitforattach with a stale lock: %.1f s" % took)
        check(took < 20, "waitforattach waited %.1f s on a stale lock" % took)
        check(not os.path.exists(DB_LOCK_TAKEN), "the stale lock is still there")
        with open(c.logfile) as f:
            check("removed open-iscsi's database lock" in f.read(),
                  "the log does not say the stale lock was removed")
        c.ok(k.mountdevice(vol, dev, opts))
        c.tear_down(vol, uids=())
        check(not sessions(c.iqn1), "session left: %r" % sessions(c.iqn1))
    finally:
        if p is not None:
            p.kill()
            p.wait()
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        if os.path.exists(DB_LOCK_TAKEN):
            os.unlink(DB_LOCK_TAKEN)


class CsiEndpoint:
    """flexvol-csi --driver iscsi of the case's build on a socket in the case's dir (the driver
    log is the case's; the endpoint's own stdout and stderr go to endpoint.log), called with the
    tests' client csi-call (tests/csi/build on the host)."""

    def __init__(self, c, **env):
        self.c = c
        sanity = run(os.path.join(WS, "tests", "csi", "build"), "--print").stdout.strip().splitlines()[-1]
        self.call_bin = os.path.join(os.path.dirname(sanity), "csi-call")
        check(os.access(self.call_bin, os.X_OK), "no csi-call at %s: run tests/csi/build on the host"
              % self.call_bin)
        self.sock = os.path.join(c.dir, "csi.sock")
        self.logfile = os.path.join(c.dir, "endpoint.log")
        self.log = open(self.logfile, "w")
        self.proc = subprocess.Popen([os.path.join(c.build, "flexvol-csi"), "--endpoint", "unix://" + self.sock,
                                      "--driver", "iscsi"], env=dict(c.env, FLEXVOL_NODE_NAME=c.node, **env),
                                     stdout=self.log, stderr=self.log)
        end = time.monotonic() + 20
        while not os.path.exists(self.sock):
            if self.proc.poll() is not None or time.monotonic() >= end:
                self.stop()
                raise Fail("flexvol-csi did not start")
            time.sleep(0.05)

    def attempt(self, method, req):
        """(exit status, the answer or csi-call's 'METHOD: code=N message=...' line)"""
        svc = next((x for x in ("Node", "Controller") if method.startswith(x)), "Identity")
        p = subprocess.run([self.call_bin, "-endpoint", "unix://" + self.sock, "/csi.v1.%s/%s" % (svc, method),
                            json.dumps(req)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=300)
        return p.returncode, (json.loads(p.stdout) if p.returncode == 0 else p.stderr.strip())

    def __call__(self, method, req):
        rc, out = self.attempt(method, req)
        check(rc == 0, "%s: %s" % (method, self.c.redact(str(out))))
        return out

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        self.log.close()


def csi_lifecycle(c):
    """iSCSI through flexvol-csi --driver iscsi on the real target (the CSI Controller and Node
    services on the op layer): ControllerPublishVolume answers the handle of the LUN's disk,
    touching nothing; NodeStageVolume logs in, formats and mounts; NodePublishVolume binds it into the pod's
    target; NodeUnpublishVolume and NodeUnstageVolume undo that and log out. Every call twice (a
    retry changes nothing); the data kept across a second stage; no session, mount or record left."""
    staging = os.path.join(c.dir, "staging")
    pods = os.path.join(c.dir, "pods")
    os.makedirs(staging)
    os.makedirs(pods)
    csi = CsiEndpoint(c)
    try:
        vid = "pv-csi"
        cap = {"mount": {"fsType": "ext4"}, "accessMode": {"mode": "SINGLE_NODE_WRITER"}}
        ctx = {"targetPortal": c.portal, "iqn": c.iqn1, "lun": "1"}
        stage = {"volumeId": vid, "stagingTargetPath": staging, "volumeCapability": cap,
                 "volumeContext": ctx}
        target = os.path.join(pods, "p1")
        pub = {"volumeId": vid, "stagingTargetPath": staging, "targetPath": target,
               "volumeCapability": cap, "volumeContext": ctx}
        for rnd in range(2):
            # the attach as external-attacher asks it (the options checked, the handle answered)
            cpub = {"volumeId": vid, "nodeId": c.node, "volumeCapability": cap, "volumeContext": ctx}
            handle = csi("ControllerPublishVolume", cpub)["publishContext"]["device"]
            for _ in range(2):
                csi("NodeStageVolume", stage)
            check(os.path.realpath(handle) == lun_disks(c.iqn1, 1)[0],
                  "the published handle %s is not LUN 1's disk %r" % (handle, lun_disks(c.iqn1, 1)))
            check(len(sessions(c.iqn1)) == 1, "sessions after stage: %r" % sessions(c.iqn1))
            dev = lun_disks(c.iqn1, 1)
            m = mounted_at(os.path.join(staging, vid))
            check(len(dev) == 1 and m and m[0][1] == dev[0], "staged mount %r, LUN 1 %r" % (m, dev))
            for _ in range(2):
                csi("NodePublishVolume", pub)
            data = os.path.join(target, "data")
            if rnd == 0:
                with open(data, "w") as f:
                    f.write("through CSI")
            else:
                with open(data) as f:
                    check(f.read() == "through CSI", "the data is not there after a second stage")
            stats = csi("NodeGetVolumeStats", {"volumeId": vid, "volumePath": target,
                                               "stagingTargetPath": staging})
            check(int(stats["usage"][0]["total"]) > 32 << 20, "stats %r" % stats)
            for _ in range(2):
                csi("NodeUnpublishVolume", {"volumeId": vid, "targetPath": target})
            check(not os.path.exists(target), "the target was left")
            for _ in range(2):
                csi("NodeUnstageVolume", {"volumeId": vid, "stagingTargetPath": staging})
            check(not sessions(c.iqn1), "session left after unstage: %r" % sessions(c.iqn1))
            check(not mounts_under(c.dir), "mounts left: %r" % mounts_under(c.dir))
            check(not node_records(), "node records left: %r" % node_records())
            csi("ControllerUnpublishVolume", {"volumeId": vid, "nodeId": c.node})
            log("round %d: controller publish, stage, publish, unpublish, unstage (each twice), "
                "controller unpublish: ok" % (rnd + 1))
    finally:
        csi.stop()
    check(not os.path.exists(csi.sock), "flexvol-csi left its socket")


def session_chap_user(sid):
    """the CHAP user name session @sid logged in with (the kernel's, sysfs, root only); "" if none"""
    try:
        with open("/sys/class/iscsi_session/session%d/username" % sid) as f:
            v = f.read().strip()
    except OSError:
        return ""
    return "" if v in ("", "(null)") else v


def csi_chap(c):
    """CHAP through flexvol-csi (issue 37 point 2): NodeStageVolume's node-stage secrets, with the
    keys of the FlexVolume Secret (discovery.* and session.* username/password), log in to the
    CHAP target: ControllerPublishVolume (external-attacher passes no secrets), stage (the session
    authenticated as the secret's user), publish, the data written, unpublish, unstage, each twice;
    a second round reads the data; nothing left, no secret on disk. Without secrets, with a wrong
    password, with a key that is no CHAP setting: NodeStageVolume fails with a message naming no
    value and leaves no session, no node or discovery record, no mount, no secret on disk. No
    secret value, in clear or base64, in the driver log, the endpoint's output or any answer."""
    user, secret = c.f["FV_ISCSI_CHAP_USER"], c.f["FV_ISCSI_CHAP_SECRET"]
    bad = "not-the-secret-%d" % os.getpid()
    disc = "disc-secret-%d" % os.getpid()
    values = (secret, bad, disc)
    c.hide = list(values)
    staging = os.path.join(c.dir, "staging")
    pods = os.path.join(c.dir, "pods")
    os.makedirs(staging)
    os.makedirs(pods)
    vid = "pv-csi-chap"
    cap = {"mount": {"fsType": "ext4"}, "accessMode": {"mode": "SINGLE_NODE_WRITER"}}
    ctx = {"targetPortal": c.portal, "iqn": c.iqn2, "lun": "1"}
    target = os.path.join(pods, "p1")
    pub = {"volumeId": vid, "stagingTargetPath": staging, "targetPath": target,
           "volumeCapability": cap, "volumeContext": ctx}
    right = {"session.username": user, "session.password": secret,
             "discovery.username": "disc-user", "discovery.password": disc}

    def stage(secrets):
        q = {"volumeId": vid, "stagingTargetPath": staging, "volumeCapability": cap, "volumeContext": ctx}
        if secrets is not None:
            q["secrets"] = secrets
        return q

    def secrets_on_disk():
        hits = []
        for v in values:
            hits += files_containing(v)
            for top in (c.state, os.path.join(c.dir, "run")):
                for d, _, files in os.walk(top):
                    for n in files:
                        try:
                            with open(os.path.join(d, n), "rb") as f:
                                if v.encode() in f.read():
                                    hits.append(os.path.join(d, n))
                        except OSError:
                            pass
        return hits

    def nothing_left(what):
        check(not sessions(c.iqn2), "%s: session left: %r" % (what, sessions(c.iqn2)))
        check(not node_records(), "%s: node records left: %r" % (what, node_records()))
        check(not discovery_records(), "%s: discovery records left: %r" % (what, discovery_records()))
        check(not mounts_under(c.dir), "%s: mounts left: %r" % (what, mounts_under(c.dir)))
        check(not secrets_on_disk(), "%s: a secret value in %r" % (what, secrets_on_disk()))

    csi = CsiEndpoint(c, FLEXVOL_DEBUG="1")      # the debug lines too: no secret in them
    try:
        # the right secrets
        for rnd in range(2):
            cpub = {"volumeId": vid, "nodeId": c.node, "volumeCapability": cap, "volumeContext": ctx}
            csi("ControllerPublishVolume", cpub)
            t = time.monotonic()
            for _ in range(2):
                csi("NodeStageVolume", stage(right))
            c.record("csi-stage-chap", time.monotonic() - t)
            sid = sessions(c.iqn2)
            check(len(sid) == 1, "sessions after stage: %r" % sid)
            check(session_chap_user(sid[0]) == user, "session %d logged in as %r, not with CHAP as %s"
                  % (sid[0], session_chap_user(sid[0]), user))
            dev = lun_disks(c.iqn2, 1)
            m = mounted_at(os.path.join(staging, vid))
            check(len(dev) == 1 and m and m[0][1] == dev[0], "staged mount %r, LUN 1 %r" % (m, dev))
            for _ in range(2):
                csi("NodePublishVolume", pub)
            data = os.path.join(target, "data")
            if rnd == 0:
                with open(data, "w") as f:
                    f.write("CHAP through CSI")
            else:
                with open(data) as f:
                    check(f.read() == "CHAP through CSI", "the data is not there after a second stage")
            for _ in range(2):
                csi("NodeUnpublishVolume", {"volumeId": vid, "targetPath": target})
            for _ in range(2):
                csi("NodeUnstageVolume", {"volumeId": vid, "stagingTargetPath": staging})
            csi("ControllerUnpublishVolume", {"volumeId": vid, "nodeId": c.node})
            nothing_left("round %d" % (rnd + 1))
            log("round %d: stage with the node-stage secrets (CHAP session as %s), publish, unpublish, "
                "unstage (each twice): ok" % (rnd + 1, user))
        # refused: each a clear error, nothing left behind
        for what, secrets, words in (
                ("no secrets", None, "authentication"),
                ("a wrong password", dict(right, **{"session.password": bad}), "CHAP authentication failed"),
                ("a key that is no CHAP setting", {"session.username": user, "session.passwd": secret},
                 "Secret key 'session.passwd' is not a CHAP setting")):
            t = time.monotonic()
            rc, out = csi.attempt("NodeStageVolume", stage(secrets))
            out = str(out)
            check(c.redact(out) == out, "%s: a secret value in the answer" % what)
            log("%s: exit %d after %.1f s: %s" % (what, rc, time.monotonic() - t, out))
            check(rc != 0 and words in out, "%s: NodeStageVolume answered %d %r" % (what, rc, out))
            nothing_left(what)
    finally:
        csi.stop()
    with open(c.logfile) as f:
        check(re.search(r"logged in to %s .*, CHAP\)" % re.escape(c.iqn2), f.read()),
              "the driver log has no CHAP login to %s" % c.iqn2)
    for path, what in ((c.logfile, "the driver log"), (csi.logfile, "the endpoint's output")):
        with open(path, errors="replace") as f:
            text = f.read()
        check(c.redact(text) == text, "a secret value is in %s" % what)


def state_wiped(c):
    """Teardown with the state dir wiped: the kernel's view (mount -> sysfs -> session) finds the
    target and keeps the session while LUN 2 is mounted; the last teardown leaves the session,
    which nothing says is ours any more (issue 17 point 5), and logs why."""
    k = c.k
    c.bring_up("pv-w1", c.opts("pv-w1", lun=1))
    c.bring_up("pv-w2", c.opts("pv-w2", lun=2))
    shutil.rmtree(c.state)
    c.ok(k.unmount("pod-a", "pv-w1"))
    c.ok(k.unmountdevice("pv-w1"))
    check(len(sessions(c.iqn1)) == 1, "session went while LUN 2 is mounted")
    c.ok(k.detach("pv-w1"))
    check(len(sessions(c.iqn1)) == 1, "detach logged out while LUN 2 is mounted")
    shutil.rmtree(c.state, ignore_errors=True)
    c.ok(k.unmount("pod-a", "pv-w2"))
    c.ok(k.unmountdevice("pv-w2"))
    # with the state wiped, nothing says the session is ours: only what flexvol knows it created is
    # ever logged out (issue 17 point 5); the session stays, and the log says why
    check(len(sessions(c.iqn1)) == 1, "a session flexvol cannot tell its own was logged out")
    with open(c.logfile) as f:
        check("flexvol did not create it" in f.read(), "the log does not say why the session stays")
    c.ok(k.detach("pv-w2"))
    c.ok(k.unmountdevice("pv-w2"))


def relogin(c):
    """A sibling's teardown logs the target out between waitforattach and mountdevice
    (LUN 1 not mounted yet): mountdevice logs in again and mounts the right disk."""
    k = c.k
    oa = c.opts("pv-a", lun=1)
    wa = c.ok(k.waitforattach(c.ok(k.attach(oa))["device"], oa))
    c.bring_up("pv-b", c.opts("pv-b", lun=2))
    c.tear_down("pv-b")
    check(not sessions(c.iqn1), "the target stayed logged in: %r" % sessions(c.iqn1))
    c.ok(k.mountdevice("pv-a", wa["device"], oa))
    dev = lun_disks(c.iqn1, 1)
    check(len(dev) == 1 and mounted_at(k.gmp("pv-a"))[0][1] == dev[0], "global mount %r, LUN 1 %r"
          % (mounted_at(k.gmp("pv-a")), dev))
    c.ok(k.mount("pod-a", "pv-a", oa))
    c.tear_down("pv-a")
    check(not sessions(c.iqn1), "session left: %r" % sessions(c.iqn1))


def measure(c):
    """Not a CI case: N rounds (FV_ROUNDS, default 5) of waitforattach and unmountdevice, timed."""
    k, vol = c.k, "pv-measure"
    opts = c.opts(vol)
    for _ in range(int(os.environ.get("FV_ROUNDS", "5"))):
        h = c.ok(k.attach(opts))["device"]
        t = time.monotonic()
        dev = c.ok(k.waitforattach(h, opts))["device"]
        c.record("waitforattach-call", time.monotonic() - t)
        t = time.monotonic()
        c.ok(k.mountdevice(vol, dev, opts))
        c.record("mountdevice-call", time.monotonic() - t)
        t = time.monotonic()
        c.ok(k.unmountdevice(vol))
        c.record("unmountdevice-call", time.monotonic() - t)
        c.ok(k.detach(vol))
        check(not sessions(c.iqn1), "session left")
    for lo, dn in c.driver_latency():
        c.record("driver-login", lo / 1000.0)
        c.record("driver-login-to-device-node", dn / 1000.0)
    with open(c.logfile) as f:
        for line in f:
            m = re.search(r"logged out of \S+ \(1 session\) in (\d+) ms", line)
            if m:
                c.record("driver-logout", int(m.group(1)) / 1000.0)
            m = re.search(r"latency: (?:unmountdevice|release) (\d+) ms", line)
            if m:
                c.record("driver-unmountdevice", int(m.group(1)) / 1000.0)


def cycle_ab(c):
    """Not a CI case: mountdevice and unmountdevice of this build against a previous release's
    (FV_OLD_BUILD, a build directory holding its iscsi driver), interleaved: FV_ROUNDS rounds
    (default 5) of FV_CYCLES cycles each (default 3), which build goes first alternating; per
    round the medians, and the median of the rounds' paired ratios (new/old).  Each cycle:
    attach, waitforattach, mountdevice (timed), unmountdevice (timed: umount, logout), detach."""
    old_build = os.environ.get("FV_OLD_BUILD")
    check(old_build, "FV_OLD_BUILD names the previous release's build directory")
    if not os.path.isabs(old_build):
        old_build = os.path.join(WS, old_build)
    env_old = dict(c.env, FLEXVOL_STATE_DIR=os.path.join(c.dir, "state-old"),
                   FLEXVOL_RUN_DIR=os.path.join(c.dir, "run-old"))
    k_old = Kubelet(Driver(os.path.join(old_build, "iscsi"), env_old, timeout=200),
                    os.path.join(c.dir, "kubelet-old"), c.node)
    subjects = [("new", c.k), ("old", k_old)]
    vol = "pv-ab"
    opts = c.opts(vol)

    def one(k):
        h = c.ok(k.attach(opts))["device"]
        dev = c.ok(k.waitforattach(h, opts))["device"]
        t = time.monotonic()
        c.ok(k.mountdevice(vol, dev, opts))
        md = time.monotonic() - t
        t = time.monotonic()
        c.ok(k.unmountdevice(vol))
        umd = time.monotonic() - t
        c.ok(k.detach(vol))
        check(not sessions(c.iqn1), "session left")
        return md * 1000, umd * 1000

    med = lambda xs: sorted(xs)[len(xs) // 2] if len(xs) % 2 else \
        (sorted(xs)[len(xs) // 2 - 1] + sorted(xs)[len(xs) // 2]) / 2  # noqa: E731
    one(c.k)  # warm-up: formats the LUN
    rounds = []
    for rnd in range(int(os.environ.get("FV_ROUNDS", "5"))):
        r = {"new": [], "old": []}
        for i in range(int(os.environ.get("FV_CYCLES", "3"))):
            for name, k in (subjects if (rnd + i) % 2 == 0 else subjects[::-1]):
                r[name].append(one(k))
        row = {n: (med([x[0] for x in r[n]]), med([x[1] for x in r[n]])) for n in r}
        rounds.append(row)
        log("cycle_ab round %d: mountdevice new %.0f old %.0f ms (%.2f), unmountdevice new %.0f "
            "old %.0f ms (%.2f)" % (rnd + 1, row["new"][0], row["old"][0],
                                    row["new"][0] / row["old"][0], row["new"][1], row["old"][1],
                                    row["new"][1] / row["old"][1]))
    for j, op in enumerate(("mountdevice", "unmountdevice")):
        c.record("ab-%s-new" % op, med([r["new"][j] for r in rounds]) / 1000)
        c.record("ab-%s-old" % op, med([r["old"][j] for r in rounds]) / 1000)
        log("cycle_ab %s: new %.0f ms, old %.0f ms, new/old %.2f (median of %d paired ratios)"
            % (op, med([r["new"][j] for r in rounds]), med([r["old"][j] for r in rounds]),
               med([r["new"][j] / r["old"][j] for r in rounds]), len(rounds)))


def detach_unmounted(c):
    """detach releases a node-side attach nobody mounted: after waitforattach alone (found by the
    options' volume name, a hint) and after a mountdevice that refused the device."""
    k, vol = c.k, "pv-dt"
    opts = c.opts(vol)
    c.ok(k.waitforattach("", opts))
    check(len(sessions(c.iqn1)) == 1, "logged in")
    c.ok(k.detach(vol))
    check(not sessions(c.iqn1), "session left after detach of a never-mounted volume: %r"
          % sessions(c.iqn1))
    # the LUN holds ext4 now? make sure it holds something else: mountdevice asks for xfs on ext4
    dev = c.ok(k.waitforattach("", opts))["device"]
    c.ok(k.mountdevice(vol, dev, opts))
    c.ok(k.unmountdevice(vol))
    dev = c.ok(k.waitforattach("", opts))["device"]
    r = k.mountdevice(vol, dev, c.opts(vol, fstype="xfs"))
    check(r.status == "Failure" and "refusing" in r["message"], "%r" % r)
    c.ok(k.detach(vol))
    check(not sessions(c.iqn1), "session left after detach of a refused volume: %r"
          % sessions(c.iqn1))
    # pv-x's options claim to be pv-dt2 (user options win, contract §2), and pv-x is mounted:
    # pv-dt2's detach neither fails on pv-x's LUN nor releases it
    ox = c.opts("pv-x", lun=2, **{"kubernetes.io/pvOrVolumeName": "pv-dt2"})
    c.bring_up("pv-x", ox)
    c.ok(k.detach("pv-dt2"))
    check(len(sessions(c.iqn1)) == 1 and lun_disks(c.iqn1, 2), "pv-x's LUN went with pv-dt2")
    check(len(mounted_at(k.poddir("pod-a", "pv-x"))) == 1, "pv-x's pod lost its mount")
    c.tear_down("pv-x")
    check(not sessions(c.iqn1), "session left: %r" % sessions(c.iqn1))


# --- node mode (attach_mode = node): kubelet calls only mount and unmount (issue 10) ----------

def node_mode(c):
    """Switch the case's driver to node mode: init says attach:false."""
    c.env["FLEXVOL_ATTACH_MODE"] = "node"
    r = c.ok(c.k.init())
    check(r["capabilities"]["attach"] is False, "node mode: init attach %r" % r["capabilities"])
    return c.k


def devmount(c, vol):
    """The device mount of pod dir name @vol: mounts/<name>/<target-lun> (node mode keys)."""
    d = os.path.join(c.dir, "run", "iscsi", "mounts", vol)
    subs = os.listdir(d) if os.path.isdir(d) else []
    return os.path.join(d, subs[0]) if len(subs) == 1 else os.path.join(d, "?")


def node_lifecycle(c):
    """Node mode: mount logs in, formats and mounts once per node; the last unmount logs out.
    Twice, data kept; every call twice."""
    k, vol = node_mode(c), "pv-node"
    opts = c.opts(vol)
    for rnd in (1, 2):
        t = time.monotonic()
        c.ok(k.mount("pod-a", vol, opts))
        c.record("node-mount-first-pod", time.monotonic() - t)
        c.ok(k.mount("pod-a", vol, opts))
        check(len(sessions(c.iqn1)) == 1, "one session: %r" % sessions(c.iqn1))
        dm = mounted_at(devmount(c, vol))
        check(len(dm) == 1 and dm[0][2] == "ext4" and dm[0][1] in lun_disks(c.iqn1, 1),
              "device mount %r" % dm)
        c.ok(k.mount("pod-b", vol, opts))
        pa = os.path.join(k.poddir("pod-a", vol), "data.txt")
        if rnd == 1:
            with open(pa, "w") as f:
                f.write("round 1\n")
                f.flush()
                os.fsync(f.fileno())
        else:
            with open(pa) as f:
                check(f.read() == "round 1\n", "data of round 1")
        c.ok(k.unmount("pod-a", vol))
        check(len(sessions(c.iqn1)) == 1, "pod-b still uses the session")
        t = time.monotonic()
        c.ok(k.unmount("pod-b", vol))
        c.record("node-unmount-last-pod", time.monotonic() - t)
        c.ok(k.unmount("pod-b", vol))
        check(not mounted_at(devmount(c, vol)), "device mount left")
        check(not sessions(c.iqn1), "session left after the last pod: %r" % sessions(c.iqn1))
        log("node round %d ok" % rnd)


def node_two_luns(c):
    """Node mode: two LUNs of one target in two pods, mounted and unmounted in parallel: one
    session; the logout comes only after both are gone."""
    k = node_mode(c)
    oa, ob = c.opts("pv-a", lun=1), c.opts("pv-b", lun=2)
    _, errors = in_parallel([lambda: c.ok(k.mount("pod-a", "pv-a", oa)),
                             lambda: c.ok(k.mount("pod-b", "pv-b", ob))])
    check(not errors, "parallel mounts: %r" % errors)
    check(len(sessions(c.iqn1)) == 1, "one session for both LUNs: %r" % sessions(c.iqn1))
    c.ok(k.unmount("pod-a", "pv-a"))
    check(len(sessions(c.iqn1)) == 1, "the session went with LUN 1 while LUN 2 is mounted")
    check(lun_disks(c.iqn1, 1) == [], "LUN 1 disk left behind: %r" % lun_disks(c.iqn1, 1))
    p = os.path.join(k.poddir("pod-b", "pv-b"), "still.txt")
    with open(p, "w") as f:
        f.write("x" * 4096)
        f.flush()
        os.fsync(f.fileno())
    c.ok(k.unmount("pod-b", "pv-b"))
    check(not sessions(c.iqn1), "session left after both: %r" % sessions(c.iqn1))
    # and both unmounts at once
    for u, v, o in (("pod-a", "pv-a", oa), ("pod-b", "pv-b", ob)):
        c.ok(k.mount(u, v, o))
    _, errors = in_parallel([lambda: c.ok(k.unmount("pod-a", "pv-a")),
                             lambda: c.ok(k.unmount("pod-b", "pv-b"))])
    check(not errors, "parallel unmounts: %r" % errors)
    check(not sessions(c.iqn1), "session left after parallel unmounts: %r" % sessions(c.iqn1))


def node_chap_secret(c):
    """Node mode: CHAP from the PV's Secret (kubernetes.io/secret/<key>, base64); a wrong one is a
    Failure with no session left; secrets never logged."""
    k, vol = node_mode(c), "pv-secret"
    user, secret = c.f["FV_ISCSI_CHAP_USER"], c.f["FV_ISCSI_CHAP_SECRET"]
    bad = "not-the-secret-%d" % os.getpid()
    u = {"targetPortal": c.portal, "iqn": c.iqn2, "lun": "1"}
    wrong = k.options(vol, u, fstype="ext4", pod="pod-a",
                      secrets={"session.username": user, "session.password": bad})
    r = k.mount("pod-a", vol, wrong)
    check(r.status == "Failure" and "CHAP authentication failed" in r["message"], "%r" % r)
    check(bad not in r["message"], "the secret is in the message")
    check(not sessions(c.iqn2), "session left after a wrong secret: %r" % sessions(c.iqn2))
    check(not mounts_under(c.dir), "mounts left: %r" % mounts_under(c.dir))
    broken = json.loads(wrong)
    broken["kubernetes.io/secret/session.password"] = "%%%not base64"
    r = k.mount("pod-a", vol, json.dumps(broken))
    check(r.status == "Failure" and "base64" in r["message"], "%r" % r)
    good = k.options(vol, u, fstype="ext4", pod="pod-a",
                     secrets={"session.username": user, "session.password": secret})
    t = time.monotonic()
    c.ok(k.mount("pod-a", vol, good))
    c.record("node-mount-chap-secret", time.monotonic() - t)
    check(len(sessions(c.iqn2)) == 1, "CHAP session %r" % sessions(c.iqn2))
    c.ok(k.unmount("pod-a", vol))
    check(not sessions(c.iqn2), "session left: %r" % sessions(c.iqn2))
    c.no_secret_logged(secret)
    c.no_secret_logged(bad)
    for s in (secret, bad):
        c.no_secret_logged(base64.b64encode(s.encode()).decode())


def gc(c):
    """Issue 17 point 2: the collector releases iSCSI sessions kubelet never came back for (through
    the class's backend release), never one in use.  Controller mode: unmountdevice killed after its
    umount; node mode: a mount killed before the bind, the pod deleted."""
    k, vol = c.k, "pv-gc"
    grace0 = dict(c.env, FLEXVOL_GC_GRACE="0")
    c.bring_up(vol, c.opts(vol))
    c.ok(c.drv.call("gc", env=grace0))
    check(len(sessions(c.iqn1)) == 1, "gc logged out a session in use")
    c.ok(k.unmount("pod-a", vol))
    run("umount", k.gmp(vol))  # unmountdevice killed right after its umount
    c.ok(c.drv.call("gc"))
    check(len(sessions(c.iqn1)) == 1, "a young record is left alone")
    c.ok(c.drv.call("gc", env=grace0))
    check(not sessions(c.iqn1), "session left after gc: %r" % sessions(c.iqn1))
    # node mode
    node_mode(c)
    c.ok(k.mount("pod-b", vol, c.opts(vol)))
    pd = k.poddir("pod-b", vol)
    run("umount", pd)
    os.rmdir(pd)
    c.ok(c.drv.call("gc", env=dict(grace0, FLEXVOL_ATTACH_MODE="node")))
    check(not sessions(c.iqn1), "session left after node-mode gc: %r" % sessions(c.iqn1))
    check(not mounts_under(c.dir), "mounts left: %r" % mounts_under(c.dir))


def node_inline_names(c):
    """Issue 17 point 7: two pods' inline volumes named alike on different LUNs are two volumes."""
    k = node_mode(c)
    c.ok(k.mount("pod-a", "data", c.opts("data", lun=1)))
    c.ok(k.mount("pod-b", "data", c.opts("data", lun=2)))
    ma, mb = mounted_at(k.poddir("pod-a", "data")), mounted_at(k.poddir("pod-b", "data"))
    check(len(ma) == 1 and len(mb) == 1 and ma[0][1] != mb[0][1], "two disks: %r %r" % (ma, mb))
    c.ok(k.unmount("pod-a", "data"))
    check(len(mounted_at(k.poddir("pod-b", "data"))) == 1, "pod-b intact")
    c.ok(k.unmount("pod-b", "data"))
    check(not sessions(c.iqn1), "session left: %r" % sessions(c.iqn1))
# --- issue 17: fencing, CHAP per volume, what is ours ----------------------------------------

def make_iface(name, initiator):
    """An open-iscsi iface with its own initiator name: a second 'node' in one guest."""
    run("iscsiadm", "-m", "iface", "-I", name, "-o", "new", check_rc=False)
    run("iscsiadm", "-m", "iface", "-I", name, "-o", "update", "-n", "iface.initiatorname", "-v", initiator)


def delete_iface(name):
    run("iscsiadm", "-m", "iface", "-I", name, "-o", "delete", check_rc=False)


def session_of(iqn, iface):
    """sids of the sessions to @iqn through @iface."""
    out = []
    for sid in sessions(iqn):
        try:
            with open("/sys/class/iscsi_session/session%d/ifacename" % sid) as f:
                if f.read().strip() == iface:
                    out.append(sid)
        except OSError:
            pass
    return out


def disk_of(sid, lun):
    b = glob.glob("/sys/class/iscsi_session/session%d/device/target*/*:*:*:%d/block/*" % (sid, lun))
    return "/dev/" + os.path.basename(b[0]) if b else None


def pr_state(dev):
    """(registered keys, (holder key, type text) or None) as sg_persist reads them from the target."""
    keys = run("sg_persist", "--in", "-k", dev).stdout
    res = run("sg_persist", "--in", "-r", dev).stdout
    ks = sorted(int(x, 16) for x in re.findall(r"^\s+(0x[0-9a-fA-F]+)\s*$", keys, re.M))
    m = re.search(r"Key=(0x[0-9a-fA-F]+)\s*\n\s*scope: (\S+),\s+type: (.*)", res)
    return ks, ((int(m.group(1), 16), m.group(3).strip()) if m else None)


def pr_key(initiator):
    """the driver's reservation key of an initiator name (drivers/iscsi/pr.c: FNV-1a 64)."""
    h = 0xcbf29ce484222325
    for ch in ("flexvol-pr:" + initiator).encode():
        h = ((h ^ ch) * 0x100000001b3) & 0xffffffffffffffff
    return h or 1


def can_write(dev):
    """one direct 4 KiB write to the last block of @dev, of the bytes already there (nothing changes
    when it succeeds): does the target let this initiator write?"""
    size = size_of(dev)
    seek = "%d" % (size // 4096 - 1)
    with tempfile.NamedTemporaryFile() as t:
        run("dd", "if=" + dev, "of=" + t.name, "bs=4096", "count=1", "iflag=direct", "skip=" + seek)
        p = subprocess.run(["dd", "if=" + t.name, "of=" + dev, "bs=4096", "count=1", "oflag=direct",
                            "seek=" + seek], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.returncode == 0


class Node:
    """A second kubelet + driver with its own state and run dirs and iSCSI identity (iface)."""

    def __init__(self, c, tag):
        self.dir = os.path.join(c.dir, tag)
        os.makedirs(self.dir)
        env = dict(c.env)
        env.update({"FLEXVOL_STATE_DIR": os.path.join(self.dir, "state"),
                    "FLEXVOL_RUN_DIR": os.path.join(self.dir, "run"),
                    "FLEXVOL_LOG_FILE": c.logfile, "FLEXVOL_NODE_NAME": tag})
        self.drv = Driver(c.drv.path if hasattr(c.drv, "path") else os.path.join(c.build, "iscsi"), env,
                          timeout=200)
        self.k = Kubelet(self.drv, os.path.join(self.dir, "kubelet"), tag)
        self.iface = "fv-" + tag
        self.initiator = "iqn.2024-01.io.flexvol.test:" + tag
        make_iface(self.iface, self.initiator)


def fence_two_nodes(c):
    """Two nodes (two initiator identities), one LUN: the first read-write mount reserves it
    (WRITE EXCLUSIVE - REGISTRANTS ONLY, the node's key); the second node's mountdevice is a
    Failure naming the holder's key, and the target refuses its writes; after the first node's
    unmountdevice the second gets it.  A dead holder's reservation is broken with the documented
    sg_persist commands (docs/fencing.md)."""
    a, b = Node(c, "node-a"), Node(c, "node-b")
    vol = "pv-fence"
    oa = c.opts(vol, iface=a.iface)
    ob = c.opts(vol, iface=b.iface)
    c.extra_cleanup.append(lambda: [delete_iface(n.iface) for n in (a, b)])
    c.extra_cleanup.append(lambda: pr_state_any(c, clear=True))
    try:
        da = c.ok(a.k.waitforattach(c.ok(a.k.attach(oa))["device"], oa))["device"]
        c.ok(a.k.mountdevice(vol, da, oa))
        c.ok(a.k.mount("pod-a", vol, oa))
        keys, res = pr_state(da)
        check(res is not None and "registrants only" in res[1], "node A holds no WE-RO reservation: %r %r"
              % (keys, res))
        key_a = res[0]
        check(keys == [key_a], "registered keys %r, holder 0x%x" % (keys, key_a))
        log("node A holds LUN 1 with key 0x%016x" % key_a)
        # node B in node mode: its first pod's mount is refused the same way, and leaves no session
        envn = dict(b.drv.env, FLEXVOL_ATTACH_MODE="node",
                    FLEXVOL_STATE_DIR=os.path.join(b.dir, "nstate"), FLEXVOL_RUN_DIR=os.path.join(b.dir, "nrun"))
        kn = Kubelet(Driver(b.drv.path, envn, timeout=200), os.path.join(b.dir, "kn"), "node-b")
        r = kn.mount("pod-n", vol, kn.options(vol, {"targetPortal": c.portal, "iqn": c.iqn1, "lun": "1",
                                                    "iface": b.iface}, fstype="ext4", pod="pod-n"))
        check(r.status == "Failure" and "0x%016x" % key_a in r["message"], "node mode on node B: %r" % r)
        check(session_of(c.iqn1, b.iface) == [], "node mode left a session: %r" % session_of(c.iqn1, b.iface))
        db = c.ok(b.k.waitforattach("", ob))["device"]
        check(db != da, "one disk for both sessions: %s" % db)
        # a registration of node B left by a killed call: under A's reservation (registrants only) it
        # would let B write; B's refused claim drops it
        run("sg_persist", "--out", "--register", "--param-sark=0x%016x" % pr_key(b.initiator), db)
        check(can_write(db), "a registrant cannot write (the test's premise)")
        r = b.k.mountdevice(vol, db, ob)
        check(r.status == "Failure" and "reserved for writing by another node" in r["message"] and
              "0x%016x" % key_a in r["message"], "node B mounted a LUN node A writes: %r" % r)
        check(not mounted_at(b.k.gmp(vol)), "node B's global path is mounted")
        check(not can_write(db), "the target let node B write")
        check(pr_state(db)[0] == [key_a], "node B registered: %r" % (pr_state(db),))
        # node A's second mountdevice (a kubelet retry) is still Success
        c.ok(a.k.mountdevice(vol, da, oa))
        # node A goes away cleanly: the reservation goes with its last unmount
        c.ok(a.k.unmount("pod-a", vol))
        c.ok(a.k.unmountdevice(vol))
        c.ok(a.k.detach(vol))
        check(pr_state(db) == ([], None), "reservation left after node A's unmountdevice: %r" % (pr_state(db),))
        c.ok(b.k.mountdevice(vol, db, ob))
        c.ok(b.k.mount("pod-b", vol, ob))
        keys, res = pr_state(db)
        key_b = res[0] if res else None
        check(res is not None and key_b != key_a and keys == [key_b], "node B's reservation: %r %r" % (keys, res))
        # node B dies: its filesystem is gone (lazy umount, as a crashed node's is) and its session too,
        # but its registration and reservation stay on the target
        for m in (b.k.poddir("pod-b", vol), b.k.gmp(vol)):
            run("umount", "-l", m, check_rc=False)
        for sid in session_of(c.iqn1, b.iface):
            run("iscsiadm", "-m", "session", "-r", str(sid), "--logout")
        da = c.ok(a.k.waitforattach("", oa))["device"]
        r = a.k.mountdevice(vol, da, oa)
        check(r.status == "Failure" and "0x%016x" % key_b in r["message"], "dead node B's reservation: %r" % r)
        mine = re.search(r"this node, initiator \S+, has key (0x[0-9a-f]{16})", r["message"])
        check(mine, "the message does not give this node's key: %r" % r["message"])
        # the documented break (docs/fencing.md): register this node's key, preempt the dead one's
        run("sg_persist", "--out", "--register", "--param-sark=" + mine.group(1), da)
        run("sg_persist", "--out", "--preempt", "--param-rk=" + mine.group(1), "--param-sark=0x%016x" % key_b,
            "--prout-type=5", da)
        c.ok(a.k.mountdevice(vol, da, oa))
        c.ok(a.k.mount("pod-a", vol, oa))
        check(pr_state(da)[1][0] == int(mine.group(1), 16), "after the break: %r" % (pr_state(da),))
        c.ok(a.k.unmount("pod-a", vol))
        c.ok(a.k.unmountdevice(vol))
        c.ok(a.k.detach(vol))
        c.ok(b.k.detach(vol))
        check(pr_state_any(c) == ([], None), "reservation left: %r" % (pr_state_any(c),))
        check(not sessions(c.iqn1), "sessions left: %r" % sessions(c.iqn1))
    finally:
        for n in (a, b):
            for m in sorted({m[0] for m in mounts_under(n.dir)}, key=len, reverse=True):
                run("umount", "-l", m, check_rc=False)


def pr_state_any(c, clear=False):
    """the reservation state of LUN 1 of target 1, seen through a short login of our own;
    with @clear, every registration and reservation of it is cleared first."""
    make_iface("fv-probe", "iqn.2024-01.io.flexvol.test:probe")
    try:
        run("iscsiadm", "-m", "node", "-o", "new", "-T", c.iqn1, "-p", c.portal, "-I", "fv-probe")
        run("iscsiadm", "-m", "node", "-T", c.iqn1, "-p", c.portal, "-I", "fv-probe", "--login")
        settle()
        sid = session_of(c.iqn1, "fv-probe")[0]
        d = wait_for(lambda: disk_of(sid, 1))
        if clear:
            run("sg_persist", "--out", "--register", "--param-sark=0x123", d, check_rc=False)
            run("sg_persist", "--out", "--clear", "--param-rk=0x123", d, check_rc=False)
        return pr_state(d)
    finally:
        for sid in session_of(c.iqn1, "fv-probe"):
            run("iscsiadm", "-m", "session", "-r", str(sid), "--logout", check_rc=False)
        run("iscsiadm", "-m", "node", "-o", "delete", "-T", c.iqn1, "-p", c.portal, "-I", "fv-probe",
            check_rc=False)
        delete_iface("fv-probe")
        settle()


def wait_for(fn, seconds=30):
    t = time.monotonic() + seconds
    while time.monotonic() < t:
        v = fn()
        if v:
            return v
        time.sleep(0.1)
    raise Fail("timed out waiting for %r" % fn)


def chap_per_volume(c):
    """CHAP is checked per volume, not only by the first login: with a session to the CHAP target
    logged in for one volume, another volume with a wrong secret, or with no credentials at all,
    gets a Failure (and no device); the right credentials share the session."""
    k = c.k
    user, secret = c.f["FV_ISCSI_CHAP_USER"], c.f["FV_ISCSI_CHAP_SECRET"]
    good = write_creds(c, "session.username = %s\nsession.password = %s\n" % (user, secret))
    bad = "not-the-secret-%d" % os.getpid()
    badf = os.path.join(c.dir, "bad.conf")
    shutil.copy(good, badf)
    with open(badf, "w") as f:
        f.write("session.username = %s\nsession.password = %s\n" % (user, bad))
    os.chmod(badf, 0o600)
    oa = c.opts("pv-ca", iqn=c.iqn2, chapCredentialsFile=good)
    dev, _ = c.bring_up("pv-ca", oa)
    sid = sessions(c.iqn2)
    for vol, o, word in (("pv-cb", c.opts("pv-cb", iqn=c.iqn2, chapCredentialsFile=badf), "not the ones"),
                         ("pv-cc", c.opts("pv-cc", iqn=c.iqn2), "no CHAP credentials")):
        for what, call in (("waitforattach", lambda: k.waitforattach("", o)),
                           ("mountdevice", lambda: k.mountdevice(vol, dev, o))):
            r = call()
            check(r.status == "Failure" and word in r["message"], "%s of %s: %r" % (what, vol, r))
            check(bad not in r["message"] and secret not in r["message"], "a secret in %r" % r)
        check(not mounted_at(k.gmp(vol)), "%s mounted" % vol)
    # node mode: the PV's Secret is checked the same way
    env = dict(c.env, FLEXVOL_ATTACH_MODE="node", FLEXVOL_STATE_DIR=os.path.join(c.dir, "nstate"),
               FLEXVOL_RUN_DIR=os.path.join(c.dir, "nrun"))
    kn = Kubelet(Driver(os.path.join(c.build, "iscsi"), env, timeout=200), os.path.join(c.dir, "kn"), c.node)
    u = {"targetPortal": c.portal, "iqn": c.iqn2, "lun": "1"}
    wrong = kn.options("pv-cd", u, fstype="ext4", pod="pod-n",
                       secrets={"session.username": user, "session.password": bad})
    r = kn.mount("pod-n", "pv-cd", wrong)
    check(r.status == "Failure" and "not the ones" in r["message"], "node mode, wrong Secret: %r" % r)
    check(sessions(c.iqn2) == sid, "the session changed: %r" % sessions(c.iqn2))
    c.tear_down("pv-ca")
    check(not sessions(c.iqn2), "session left: %r" % sessions(c.iqn2))
    c.no_secret_logged(secret)
    c.no_secret_logged(bad)


def admin_session_and_records_kept(c):
    """An administrator's own session to the target (its own iface and node record) and its
    discovery record for the portal: a volume uses the session, and its teardown logs out and
    deletes nothing of the administrator's; both records are exactly as they were."""
    k, vol = c.k, "pv-adm"
    c.cleanup_records()
    run("iscsiadm", "-m", "discoverydb", "-t", "sendtargets", "-p", c.portal, "-o", "new")
    run("iscsiadm", "-m", "discoverydb", "-t", "sendtargets", "-p", c.portal, "-o", "update",
        "-n", "discovery.sendtargets.auth.authmethod", "-v", "None")
    run("iscsiadm", "-m", "node", "-o", "new", "-T", c.iqn1, "-p", c.portal)
    run("iscsiadm", "-m", "node", "-T", c.iqn1, "-p", c.portal, "--login")
    settle()
    disc_before = run("iscsiadm", "-m", "discoverydb", "-t", "sendtargets", "-p", c.portal).stdout
    node_before = run("iscsiadm", "-m", "node", "-T", c.iqn1, "-p", c.portal).stdout
    admin = sessions(c.iqn1)
    check(len(admin) == 1, "admin session %r" % admin)
    # discovery CHAP settings in the volume's credentials must not be written into the admin's record
    creds = write_creds(c, "discovery.username = du\ndiscovery.password = disc-secret-%d\n" % os.getpid())
    o = c.opts(vol, lun=2, chapCredentialsFile=creds)
    c.bring_up(vol, o)
    check(sessions(c.iqn1) == admin, "another session: %r" % sessions(c.iqn1))
    c.tear_down(vol)
    check(sessions(c.iqn1) == admin, "the administrator's session was logged out: %r" % sessions(c.iqn1))
    node_after = run("iscsiadm", "-m", "node", "-T", c.iqn1, "-p", c.portal, check_rc=False)
    check(node_after.returncode == 0 and node_after.stdout == node_before,
          "the administrator's node record changed or went: %s" % node_after.stdout[-300:])
    disc_after = run("iscsiadm", "-m", "discoverydb", "-t", "sendtargets", "-p", c.portal, check_rc=False)
    check(disc_after.returncode == 0 and disc_after.stdout == disc_before,
          "the administrator's discovery record changed or went: %s" % disc_after.stdout[-300:])
    for sid in admin:
        run("iscsiadm", "-m", "session", "-r", str(sid), "--logout")
    run("iscsiadm", "-m", "node", "-o", "delete", "-T", c.iqn1, "-p", c.portal)
    run("iscsiadm", "-m", "discoverydb", "-t", "sendtargets", "-p", c.portal, "-o", "delete")


def in_use_other_holders(c):
    """The logout decision sees users that are not mounts in our namespace: a device-mapper
    target on a partition of LUN 2, LUN 2 as swap, and LUN 2 mounted in another mount namespace
    keep the session when the volume on LUN 1 is torn down."""
    k, vol = c.k, "pv-iu"
    o = c.opts(vol, lun=1)
    for what in os.environ.get("FV_IN_USE", "dm-on-partition swap other-namespace").split():
        c.bring_up(vol, o)
        sid = sessions(c.iqn1)
        d2 = wait_for(lambda: lun_disks(c.iqn1, 2))[0]
        undo = []
        try:
            if what == "dm-on-partition":
                p = subprocess.run(["sfdisk", "--no-reread", "-q", d2], input="1MiB,8MiB\n", text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                check(p.returncode == 0, "sfdisk: %s" % p.stdout)
                run("partx", "-a", d2, check_rc=False)
                settle()
                part = wait_for(lambda: glob.glob(d2 + "1") or glob.glob(d2 + "p1"))[0]
                name = "fv-iu-%d" % os.getpid()
                secs = size_of(part) // 512
                run("dmsetup", "create", name, "--table", "0 %d linear %s 0" % (secs, part))
                undo.append(lambda: run("dmsetup", "remove", name, check_rc=False))
                undo.append(lambda: run("wipefs", "-a", "-q", d2, check_rc=False))
            elif what == "swap":
                run("mkswap", "-q", d2)
                run("swapon", d2)
                undo.append(lambda: run("swapoff", d2, check_rc=False))
                undo.append(lambda: run("wipefs", "-a", "-q", d2, check_rc=False))
            else:
                run("mkfs.ext4", "-q", "-F", d2)
                mnt = os.path.join(c.dir, "ns-mnt")
                os.makedirs(mnt, exist_ok=True)
                # the new namespace starts with a copy of ours: LUN 1's mounts (the volume torn
                # down below) go from it first, or they would hold LUN 1 too (own_lun_held_elsewhere)
                holder = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c",
                                           "umount %s && umount %s && mount %s %s && echo up && "
                                           "exec sleep 600" % (k.poddir("pod-a", vol), k.gmp(vol), d2, mnt)],
                                          stdout=subprocess.PIPE, text=True)
                check(holder.stdout.readline().strip() == "up", "the other namespace's mount")
                check(not mounted_at(mnt), "the other namespace's mount is visible here")

                def stop(h=holder):
                    h.kill()
                    h.wait()
                undo.append(lambda: run("wipefs", "-a", "-q", d2, check_rc=False))
                undo.append(stop)
            c.tear_down(vol)
            check(sessions(c.iqn1) == sid and lun_disks(c.iqn1, 2) == [d2],
                  "%s: the session (or LUN 2) went while LUN 2 is in use: %r" % (what, sessions(c.iqn1)))
            log("%s: the session stayed" % what)
        finally:
            for u in reversed(undo):
                u()
        settle()
        # the next teardown (nothing in use now) logs out
        c.bring_up(vol, o)
        c.tear_down(vol)
        check(not sessions(c.iqn1), "%s: session left after the holder went: %r" % (what, sessions(c.iqn1)))


def own_lun_held_elsewhere(c):
    """The volume's own LUN still held in another mount namespace (a pod's container that
    outlived its kubelet, as after a partition) when unmountdevice comes: a Failure that names
    the holder, the session and the device mount kept, so that kubelet calls again; once the
    holder is gone the retry logs out.  (Success here left the session logged in for good:
    the two-node partition case saw it.)"""
    k, vol = c.k, "pv-held"
    o = c.opts(vol, lun=1)
    c.bring_up(vol, o)
    sid = sessions(c.iqn1)
    c.ok(k.unmount("pod-a", vol))
    # a copy of the node's mounts (the device mount among them) in a namespace of its own
    holder = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c",
                               "echo up && exec sleep 600"], stdout=subprocess.PIPE, text=True)
    try:
        check(holder.stdout.readline().strip() == "up", "the holder's namespace")
        r = k.unmountdevice(vol)
        check(r.status == "Failure" and "still in use" in r.get("message", ""),
              "unmountdevice while the LUN is held elsewhere: %r" % r)
        check(sessions(c.iqn1) == sid, "the session went while its LUN is held: %r" % sessions(c.iqn1))
        check(mounted_at(k.gmp(vol)), "the device mount was not put back")
        log("held elsewhere: %s" % r.get("message"))
    finally:
        holder.kill()
        holder.wait()
    c.ok(k.unmountdevice(vol))
    check(not mounted_at(k.gmp(vol)), "global path still mounted")
    check(not sessions(c.iqn1), "session left after the holder went: %r" % sessions(c.iqn1))
    c.ok(k.detach(vol))


CASES = {f.__name__: f for f in (lifecycle, two_luns, chap, chap_failure, records, wrong_portal, expand,
                                  sigkill_login, stale_db_lock, csi_lifecycle, csi_chap, state_wiped, relogin, measure, cycle_ab,
                                  detach_unmounted,
                                  node_lifecycle,
                                  node_two_luns, node_chap_secret, gc, node_inline_names,
                                  fence_two_nodes, chap_per_volume,
                                  admin_session_and_records_kept, in_use_other_holders,
                                  own_lun_held_elsewhere)}


def main():
    if os.environ.get("FLEXVOL_VM") != "1":
        print("iscsi_driver.py: run inside the VM (tests/vm/run . -- tests/vm/suite t-iscsi-...)",
              file=sys.stderr)
        return 2
    names = sys.argv[1:] or list(CASES)
    failed = 0
    for n in names:
        c = Case(n)
        t = time.monotonic()
        try:
            CASES[n](c)
            log("%s: ok in %.1f s" % (n, time.monotonic() - t))
        except Exception as e:  # noqa: BLE001 - report any failure of the case
            failed += 1
            print("%s: FAIL: %s: %s" % (n, type(e).__name__, c.redact(str(e))), file=sys.stderr, flush=True)
            c.dump_log()
        finally:
            c.cleanup()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
