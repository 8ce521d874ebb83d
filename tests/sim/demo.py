#!/usr/bin/env python3
"""The main job: kubelet-style lifecycles of a loop volume, every call and reply shown.

  make demo      (as root; a private mount namespace, a scratch dir under /tmp,
                  everything released at the end)

The sequence is the contract's §4.1 (attachable driver, controller-manager
attach/detach on): KCM init/attach/isattached, kubelet waitforattach ->
mountdevice -> mount, a pod writes a file, then unmount -> unmountdevice, KCM
detach.  Then the volume is attached and mounted again for a second pod, which
reads the file back (the filesystem is found, not made again), one bad input is
refused with its message (nothing is bound), and the driver's log is shown:
one line per call plus the mkfs and mount lines an operator debugs with.
"""
import argparse
import os
import shlex
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flexsim import Driver, Kubelet, cleanup, in_private_mount_ns, loops_under, mounts_under  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("make demo: needs root (it binds a real loop device)")
        return 1
    in_private_mount_ns([sys.executable, os.path.abspath(__file__), *sys.argv[1:]])
    build = os.path.abspath(a.build)
    scratch = tempfile.mkdtemp(prefix="flexvol-demo.", dir="/tmp")
    root = os.path.join(scratch, "images")
    os.makedirs(root)
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "FLEXVOL_LOOP_ROOT": root,
           "FLEXVOL_STATE_DIR": os.path.join(scratch, "state"),
           "FLEXVOL_RUN_DIR": os.path.join(scratch, "run"),
           "FLEXVOL_LOG_FILE": os.path.join(scratch, "loop.log"), "FLEXVOL_CONFIG": "/dev/null"}
    who = {"init": "kcm", "attach": "kcm", "isattached": "kcm", "detach": "kcm", "version": "you"}

    def trace(argv, r):
        args = " ".join(shlex.quote(x) for x in argv[1:])
        print("%-7s $ loop %s" % (who.get(argv[1], "kubelet"), args.replace(scratch, "$S")))
        print("          -> %s  (exit %d, %.1f ms)" % (r.raw.strip(), r.rc, r.elapsed * 1000))

    print("S=%s  (loop root $S/images, kubelet root $S/kubelet)\n" % scratch)
    drv = Driver(os.path.join(build, "loop"), env, trace=trace)
    k = Kubelet(drv, os.path.join(scratch, "kubelet"), os.uname().nodename)
    opts = k.options("pv-demo", {"file": "demo.img", "size": "64Mi"}, fstype="ext4")
    ok = False
    text = "hello from a pod\n"
    try:
        print("which build:")
        drv.call("version", expect="Success")
        print("\nfirst pod: the volume is created, formatted and mounted")
        k.init(expect="Success")
        dev = k.attach(opts, expect="Success")["device"]
        real = k.waitforattach(dev, opts, expect="Success")["device"]
        k.isattached(opts, expect="Success")
        k.mountdevice("pv-demo", real, opts, expect="Success")
        pod_opts = k.options("pv-demo", {"file": "demo.img", "size": "64Mi"}, fstype="ext4", pod="pod-1")
        k.mount("pod-1", "pv-demo", pod_opts, expect="Success")
        path = os.path.join(k.poddir("pod-1", "pv-demo"), "hello.txt")
        with open(path, "w") as f:
            f.write(text)
        print("\n(pod-1 writes %s: %r)\n" % (path.replace(scratch, "$S"), text))
        k.unmount("pod-1", "pv-demo", expect="Success")
        k.unmountdevice("pv-demo", expect="Success")
        k.detach("pv-demo", expect="Success")
        k.isattached(opts, expect="Success")
        print("\nsecond pod: the same volume attached and mounted again")
        dev = k.attach(opts, expect="Success")["device"]
        real = k.waitforattach(dev, opts, expect="Success")["device"]
        k.mountdevice("pv-demo", real, opts, expect="Success")
        pod_opts = k.options("pv-demo", {"file": "demo.img", "size": "64Mi"}, fstype="ext4", pod="pod-2")
        k.mount("pod-2", "pv-demo", pod_opts, expect="Success")
        path = os.path.join(k.poddir("pod-2", "pv-demo"), "hello.txt")
        with open(path) as f:
            back = f.read()
        print("\n(pod-2 reads %s: %r: %s)\n" % (path.replace(scratch, "$S"), back,
                                                 "the data survived the re-attach" if back == text else "DIFFERENT"))
        k.unmount("pod-2", "pv-demo", expect="Success")
        k.unmountdevice("pv-demo", expect="Success")
        k.detach("pv-demo", expect="Success")
        print("\na bad input: a PV whose file escapes the loop root")
        bad = k.options("pv-bad", {"file": "../../etc/passwd", "size": "64Mi"}, fstype="ext4")
        r = drv.call("waitforattach", "loop:x", bad, expect="Failure")
        print("\n(refused: %s)" % r["message"].replace(scratch, "$S"))
        left = loops_under(scratch), mounts_under(scratch)
        print("\nleft behind: loop devices %s, mounts %s" % (left[0] or "none", left[1] or "none"))
        ok = not left[0] and not left[1] and back == text and r.status == "Failure"
        print("\nthe driver's log ($S/loop.log; one line per call, helpers' command lines and output):")
        with open(env["FLEXVOL_LOG_FILE"]) as f:
            for line in f:
                print("  " + line.rstrip().replace(scratch, "$S"))
    finally:
        cleanup(scratch)
        shutil.rmtree(scratch, ignore_errors=True)
    print("\ndemo: %s" % ("OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
