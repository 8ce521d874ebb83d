# SPDX-License-Identifier: Apache-2.0
"""Cluster-lane cases: the admission policy of deploy/policy/ (a ValidatingAdmissionPolicy and
its binding) against the real API server.

    deploy/policy/                     applied (-f: the resources of its kustomization, a Component)
    tests/kube/policy/*.yaml           then applied: the lane's parameters, its namespaces
    tests/kube/policy/allowed/*.yaml   each must pass admission (`kubectl apply --dry-run=server`:
                                       admission runs in full, nothing is created)
    tests/kube/policy/refused/*.yaml   each must be refused by the policy: the message names it
                                       ("ValidatingAdmissionPolicy '<name>'") and holds the text of
                                       the example's "# expect:" line

The case exists only when deploy/policy/ does.
"""
import glob
import json
import os

import re

import cluster as C
from run import CaseFailed, HERE, check

POLICY_DIR = os.path.join(C.ROOT, "deploy", "policy")
EXAMPLES = os.path.join(HERE, "policy")


def _objs(t, path):
    return t.objs(path)


def _files():
    """deploy/policy's manifests: the resources of its kustomization (a Component, which kustomize
    renders only inside an overlay), else every *.yaml."""
    k = os.path.join(POLICY_DIR, "kustomization.yaml")
    if os.path.exists(k):
        with open(k) as f:  # its "resources:" list (the lane has no YAML module)
            m = re.search(r"^resources:\n((?:\s+- .*\n)+)", f.read(), re.M)
        return [os.path.join(POLICY_DIR, r.split("#")[0].strip()[2:].strip()) for r in m.group(1).splitlines()]
    return sorted(glob.glob(os.path.join(POLICY_DIR, "*.yaml")))


def _policy_objs(t):
    return [o for f in _files() for o in _objs(t, f)]


def _expect(path):
    """The "# expect: TEXT" line of a refused example (a part of the policy's message)."""
    with open(path) as f:
        for line in f:
            if line.startswith("# expect:"):
                return line[len("# expect:"):].strip()
    return None


def _apply_policy(t, verb="apply"):
    return t.k(verb, *[a for f in _files() for a in ("-f", f)],
               *(["--ignore-not-found"] if verb == "delete" else []), check=verb == "apply")


def case_admission_policy(t):
    """deploy/policy applied, then the lane's parameters and namespaces (tests/kube/policy/*.yaml);
    every allowed/ example passes admission, every refused/ one is refused by the policy with a
    message naming it (and holding the example's "# expect:" text)."""
    objs = _policy_objs(t)
    names = [o["metadata"]["name"] for o in objs if o["kind"] == "ValidatingAdmissionPolicy"]
    check(names, f"no ValidatingAdmissionPolicy in {POLICY_DIR}")
    allowed = sorted(glob.glob(os.path.join(EXAMPLES, "allowed", "*.yaml")))
    refused = sorted(glob.glob(os.path.join(EXAMPLES, "refused", "*.yaml")))
    check(allowed and refused, f"examples missing: {len(allowed)} allowed, {len(refused)} refused in {EXAMPLES}")
    _apply_policy(t)
    # the lane's own parameters and namespaces: Namespaces first
    setup = []
    for f in sorted(glob.glob(os.path.join(EXAMPLES, "*.yaml"))):
        setup += t.objs(f)
    setup.sort(key=lambda o: o["kind"] != "Namespace")
    made_ns = [o["metadata"]["name"] for o in setup if o["kind"] == "Namespace"]
    problems = []
    try:
        for o in setup:
            t.apply(o)
        for ns in made_ns:
            C.wait_for(f"the default service account of {ns}", lambda: t.k(
                "get", "sa", "default", "-n", ns, check=False).returncode == 0, 60)
        # the API server loads a new policy within a second or so: wait until it refuses
        try:
            C.wait_for("the policy in force", lambda: t.k("apply", "--dry-run=server", "-f", refused[0],
                                                           check=False).returncode != 0, 30, 1)
        except TimeoutError:
            pass
        # admission runs in full on a server-side dry run, and nothing is created
        for f in refused:
            r = t.k("apply", "--dry-run=server", "-f", f, check=False)
            want = _expect(f)
            if r.returncode == 0:
                problems.append(f"refused/{os.path.basename(f)}: admitted")
            elif not any(f"ValidatingAdmissionPolicy '{n}'" in r.stderr for n in names):
                problems.append(f"refused/{os.path.basename(f)}: refused, but not by {names}: {r.stderr.strip()}")
            elif want and want not in r.stderr:
                problems.append(f"refused/{os.path.basename(f)}: message lacks {want!r}: {r.stderr.strip()}")
        for f in allowed:
            r = t.k("apply", "--dry-run=server", "-f", f, check=False)
            if r.returncode != 0:
                problems.append(f"allowed/{os.path.basename(f)}: refused: {r.stderr.strip()}")
    finally:
        for o in reversed(setup):
            if o["kind"] != "ConfigMap":
                t.k("delete", o["kind"].lower(), o["metadata"]["name"], "--wait=false", "--ignore-not-found",
                    *(["-n", o["metadata"]["namespace"]] if o["metadata"].get("namespace") else []), check=False)
        if getattr(t, "installed", None) is None or not _overlay_has_policy():
            _apply_policy(t, "delete")
        else:
            _apply_policy(t)  # the install's own parameters back
    if problems:
        raise CaseFailed("; ".join(problems))


def _overlay_has_policy():
    """Do the deploy overlays apply the policy themselves (then it stays, as installed)?"""
    k = os.path.join(C.ROOT, "deploy", "overlays", "kubeadm", "kustomization.yaml")
    try:
        with open(k) as f:
            return "policy" in f.read()
    except OSError:
        return False


CASES = [case_admission_policy] if os.path.isdir(POLICY_DIR) else []
if not CASES:
    print(f"note: no {os.path.relpath(POLICY_DIR, C.ROOT)}/ in this tree: the admission-policy case is not run")
