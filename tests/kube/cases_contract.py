# SPDX-License-Identifier: Apache-2.0
"""Cluster-lane case: the calls the real kubelet and controller-manager make, against the model
the kubelet simulator (tests/sim/flexsim.py) drives the drivers with.

The installed loop driver is wrapped for the length of the case: a wrapper at its name records
each call (the op, the argument count, the path arguments, the option keys and the values of the
kubernetes.io/* keys that are not secrets) and execs the real driver. A controller-mode pod
lifecycle runs through it; then every recorded call is compared with what
flexsim.Kubelet would pass for the same volume (argv shape per op, the global and pod mount
paths, the computed option keys). A difference means the simulator models something the real
components do not do (or the reverse): fix the simulator, and this case shows it.
"""
import json
import os
import shutil
import sys

import cluster as C
from run import CaseFailed, NS, PLUGINS, check

sys.path.insert(0, os.path.join(C.ROOT, "tests", "sim"))
import flexsim  # noqa: E402

TRACE = C.p("log", "trace.jsonl")
REAL = C.p("trace-real", "loop")
WRAPPER = r'''#!/usr/bin/python3
# cluster-lane call recorder (tests/kube/cases_contract.py): never prints, then runs the driver
import json, os, sys
rec = {"op": sys.argv[1] if len(sys.argv) > 1 else "", "args": []}
for a in sys.argv[2:]:
    try:
        o = json.loads(a)
    except ValueError:
        o = None
    if isinstance(o, dict):
        rec["args"].append({"keys": sorted(o), "k8s": {k: v for k, v in o.items()
                            if k.startswith("kubernetes.io/") and not k.startswith("kubernetes.io/secret/")}})
    else:
        rec["args"].append(a)
try:
    with open(%(trace)r, "a") as f:
        f.write(json.dumps(rec) + "\n")
except OSError:
    pass
os.execv(%(real)r, [%(real)r] + sys.argv[1:])
'''


def _calls():
    out = []
    try:
        with open(TRACE) as f:
            for line in f:
                out.append(json.loads(line))
    except FileNotFoundError:
        pass
    return out


def case_kubelet_contract(t):
    """The real kubelet's and controller-manager's calls (argv shape, paths, option keys) match
    the simulator's model of them (tests/sim/flexsim.Kubelet)."""
    t.ensure_mode("controller")
    drv = os.path.join(PLUGINS, "flexvol~loop", "loop")
    os.makedirs(os.path.dirname(REAL), exist_ok=True)
    shutil.copy2(drv, REAL)
    tmp = os.path.join(PLUGINS, "flexvol~loop", ".loop.trace")
    with open(tmp, "w") as f:
        f.write(WRAPPER % {"trace": TRACE, "real": REAL})
    os.chmod(tmp, 0o555)
    pos = t.logpos()
    os.rename(tmp, drv)
    pv = "loop-contract"
    try:
        # the kubelet (and the controller-manager) take the plugin directory's events when they
        # next look a plugin up, and re-probe then (init through the wrapper): that is this
        # pod's volume, so the init is waited for after it (waited for before it, on an idle
        # node, it came late in 1 run in 4)
        t.loop_pv(pv, "contract.img")
        t.pod("contract-pod", "echo x > /data/x && echo CONTRACT-OK", claim=pv, fs_group=3456)
        t.wait_op("kubelet", "init", pos, timeout=150)
        t.wait_pod("contract-pod", ("Succeeded",))
        pos = t.logpos()
        t.delete_pod("contract-pod")
        t.wait_op("kcm", "detach", pos, timeout=180)
        # that may have been an earlier case's volume (the controller-manager detaches about 10 s
        # after unmountdevice): wait for this volume's own
        C.wait_for("the detach of " + pv, lambda: any(c["op"] == "detach" and c["args"][:1] == [pv]
                                                      for c in _calls()), 180, 1)
    finally:
        # the real driver back (kubelet re-probes it); the volume is released by now
        shutil.copy2(REAL, tmp)
        os.rename(tmp, drv)
        t.drop_pv(pv)
    # only this volume's calls: a late detach or isattached of an earlier case's volume may come
    # through the wrapper too
    def ours(c):
        opts = next((a for a in c["args"] if isinstance(a, dict)), None)
        if opts is not None and opts["k8s"].get("kubernetes.io/pvOrVolumeName") not in (None, pv):
            return False
        return not (c["op"] == "detach" and c["args"][:1] != [pv])
    calls = [c for c in _calls() if c["op"] not in ("init",) and ours(c)]
    ops = [c["op"] for c in calls]
    for op in ("attach", "waitforattach", "mountdevice", "mount", "unmount", "unmountdevice", "detach"):
        check(op in ops, f"no {op} call recorded: {ops}")

    # the simulator's model, for this volume
    kroot = C.p("kubelet")
    sim = flexsim.Kubelet(type("D", (), {"name": "loop"})(), kroot, C.NODE)
    user = {"file": "contract.img", "size": "64Mi"}
    problems = []
    shapes = {"attach": 2, "isattached": 2, "detach": 2, "waitforattach": 2, "mountdevice": 3,
              "mount": 2, "unmount": 1, "unmountdevice": 1, "getvolumename": 1}
    for c in calls:
        op, args = c["op"], c["args"]
        if op in shapes and len(args) != shapes[op]:
            problems.append(f"{op}: {len(args)} arguments, the simulator passes {shapes[op]}: {args}")
            continue
        opts = next((a for a in args if isinstance(a, dict)), None)
        if op == "mountdevice" and args[0] != sim.gmp(pv):
            problems.append(f"mountdevice path {args[0]}, the simulator's {sim.gmp(pv)}")
        if op == "unmountdevice" and args[0] != sim.gmp(pv):
            problems.append(f"unmountdevice path {args[0]}, the simulator's {sim.gmp(pv)}")
        if op in ("mount", "unmount"):
            uid = args[0].split("/pods/", 1)[-1].split("/", 1)[0]
            if args[0] != sim.poddir(uid, pv):
                problems.append(f"{op} path {args[0]}, the simulator's {sim.poddir(uid, pv)}")
        if op in ("attach", "detach", "isattached") and args[-1] != C.NODE:
            problems.append(f"{op} node argument {args[-1]!r}, expected {C.NODE!r}")
        if op == "detach" and args[0] != pv:
            problems.append(f"detach volume argument {args[0]!r}, the simulator passes the PV name {pv!r}")
        if opts is None:
            continue
        real_keys = set(opts["keys"]) - set(user)
        model = json.loads(sim.options(pv, user, "ext4", ro=False, pod="p" if op == "mount" else None,
                                       fsgroup=3456 if op == "mount" else None))
        model_keys = set(model) - set(user)
        if real_keys != model_keys:
            problems.append(f"{op}: option keys {sorted(real_keys)}, the simulator's {sorted(model_keys)}")
        k8s = opts["k8s"]
        if k8s.get("kubernetes.io/pvOrVolumeName") != pv:
            problems.append(f"{op}: pvOrVolumeName {k8s.get('kubernetes.io/pvOrVolumeName')!r}")
        if op == "mount" and k8s.get("kubernetes.io/mounterArgs.FsGroup") != "3456":
            problems.append(f"mount: FsGroup {k8s.get('kubernetes.io/mounterArgs.FsGroup')!r}")
    t.contract_calls = calls
    if problems:
        raise CaseFailed("; ".join(sorted(set(problems))))


CASES = [case_kubelet_contract]
