"""Host-lane cases for the operator's side of every driver (run by tests/sim/run.py):
the version op, --version/--help, the installer's check-config op, and
"debug = true" in the node config (docs/operate.md, "Debug mode").
"""
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flexsim import Driver, case_registry, check  # noqa: E402
import test_loop  # noqa: E402

DRIVER = "loop"
CASES, case = case_registry()
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))
DRIVERS = sorted(f[:-2] for f in os.listdir(os.path.join(ROOT, "drivers"))
                 if f.endswith(".c") and f != "registry.c")


def build_version(e):
    """The version the Makefile compiled in (build/version.txt)."""
    with open(os.path.join(os.path.dirname(e.bin), "version.txt")) as f:
        return f.read().strip()


@case
def version_op(e):
    """`version` (and `--version`) answer one JSON document with the build's version, in every driver."""
    want = build_version(e)
    check(re.match(r"^[0-9A-Za-z.+_-]+$", want) and want != "unknown", "a real version: %r" % want)
    for d in DRIVERS:
        drv = Driver(os.path.join(os.path.dirname(e.bin), d), e.env)
        for op in ("version", "--version"):
            r = drv.call(op, expect="Success")
            check(r.get("version") == want, "%s %s: %r, want %r" % (d, op, r, want))
            check(set(r) == {"status", "version"}, "%s %s: only status and version: %r" % (d, op, r))
        # no config, no log: it answers even when the node config is broken
        r = drv.call("version", env=dict(e.env, FLEXVOL_CONFIG="/nonexistent/flexvol.conf"), expect="Success")
        check(r.get("version") == want, repr(r))
        r = drv.call("version", "extra", expect="Failure")
        check("version takes 0 arguments" in r["message"], r["message"])
    check(not os.path.exists(e.log), "version wrote no log")
    # the multi-call binary under its own name answers too
    r = Driver(os.path.join(os.path.dirname(e.bin), "flexvol"), e.env).call("--version", expect="Success")
    check(r.get("version") == want, repr(r))


@case
def help_op(e):
    """--help is one JSON document (Success) whose message lists the ops with their argument counts."""
    r = e.drv.call("--help", expect="Success")
    for op in ("init/0", "attach/2", "mountdevice/3", "expandfs/5", "version/0", "check-config/1"):
        check(op in r.get("message", ""), "--help names %s: %r" % (op, r))
    check(r.get("version") == build_version(e), repr(r))


@case
def version_in_every_log_line(e):
    """Every log line, details included, carries the same version as the version op."""
    want = build_version(e)
    e.drv.call("init", expect="Success")
    e.drv.call("waitforattach", "loop:x", e.opts(), expect="Success")
    e.k.detach("pv1", expect="Success")
    e.drv.call("attach", e.opts(file="../x"), e.node, expect="Failure")
    with open(e.log) as f:
        lines = f.read().splitlines()
    check(len(lines) >= 4, "log lines: %r" % lines)
    bad = [ln for ln in lines if not re.match(r"^\S+Z flexvol-loop\[\d+\] %s: " % re.escape(want), ln)]
    check(not bad, "lines without ' %s: ' after the pid: %r" % (want, bad[:3]))
    e.nothing_left("log")


@case
def check_config_op(e):
    """check-config FILE: the driver's own parser on FILE alone; a typo is a Failure naming key and line."""
    good = os.path.join(e.dir, "good.conf")
    with open(good, "w") as f:
        f.write("# ok\nloop_root = /var/lib/flexvol/loop\nlock_timeout = 30\ndebug = true\n")
    bad = os.path.join(e.dir, "bad.conf")
    with open(bad, "w") as f:
        f.write("loop_root = /var/lib/flexvol/loop\nloop_rot = /srv\n")
    for d in DRIVERS:
        drv = Driver(os.path.join(os.path.dirname(e.bin), d), e.env)
        r = drv.call("check-config", good, expect="Success")
        check(r.get("version") == build_version(e), repr(r))
        r = drv.call("check-config", bad, expect="Failure")
        check("unknown key 'loop_rot'" in r["message"] and "bad.conf:2" in r["message"], r["message"])
        # the environment must not hide a mistake in the file (nor make a good file bad)
        r = drv.call("check-config", bad, env=dict(e.env, FLEXVOL_LOOP_ROOT="/x"), expect="Failure")
        r = drv.call("check-config", good, env=dict(e.env, FLEXVOL_LOCK_TIMEOUT="nonsense"), expect="Success")
    for text, word in (("lock_timeout = 0\n", "lock_timeout"), ("debug = maybe\n", "debug"),
                       ("state_dir = relative\n", "state_dir"), ("just words\n", "key = value")):
        with open(bad, "w") as f:
            f.write(text)
        r = e.drv.call("check-config", bad, expect="Failure")
        check(word in r["message"], "%r: %r" % (text, r["message"]))
    r = e.drv.call("check-config", os.path.join(e.dir, "missing.conf"), expect="Failure")
    check("missing.conf" in r["message"], r["message"])
    e.drv.call("check-config", expect="Failure")
    check(not os.path.exists(e.log) and not os.path.exists(e.run) and not os.path.exists(e.state),
          "check-config wrote nothing on the node")


@case
def debug_from_node_config(e):
    """debug = true in the node config turns on debug lines; debug = false (the default) leaves them off."""
    conf = os.path.join(e.dir, "flexvol.conf")
    env = dict(e.env, FLEXVOL_CONFIG=conf)
    for on in (False, True):
        with open(conf, "w") as f:
            f.write("debug = %s\n" % ("true" if on else "false"))
        if os.path.exists(e.log):
            os.unlink(e.log)
        e.drv.call("waitforattach", "loop:x", e.opts(), env=env, expect="Success")
        e.drv.call("detach", "pv1", e.node, env=env, expect="Success")
        with open(e.log) as f:
            text = f.read()
        check(("devwait: " in text) == on, "debug=%s: debug lines %s: %s" % (
            on, "missing" if on else "present", text[-600:]))
    e.nothing_left("debug")


def make_env(build, name):
    return test_loop.Env(build, name)


@case
def demo_shows_what_an_operator_needs(e):
    """make demo: the version, data read back after a re-attach, one refused input, the mkfs and mount log lines."""
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tests/sim/demo.py"), "--build", os.path.dirname(e.bin)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    out = p.stdout
    check(p.returncode == 0 and out.rstrip().endswith("demo: OK"), "demo ran: rc=%d %s" % (p.returncode, out[-500:]))
    check('"version":"%s"' % build_version(e) in out, "demo shows the version")
    check("'hello from a pod\\n': the data survived the re-attach" in out, "demo reads the data back")
    check(re.search(r"waitforattach .*\.\./\.\./etc/passwd.*\n.*\"status\":\"Failure\",\"message\":\"option 'file'", out),
          "demo shows a refused bad input with its message")
    check(re.search(r"\] \S+: run: mkfs\.ext4 ", out) and re.search(r"\] \S+: mount: /dev/loop\d+ on ", out),
          "demo shows the mkfs and mount log lines")
    check(out.count("run: mkfs.ext4") == 1, "the second mountdevice found the filesystem (one mkfs)")
