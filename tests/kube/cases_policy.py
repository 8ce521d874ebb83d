# SPDX-License-Identifier: Apache-2.0
"""Cluster-lane cases: the admission policy of deploy/policy/ (a ValidatingAdmissionPolicy and
its binding) against the real API server.

    tests/kube/policy/allowed/*.yaml   each must be created by `kubectl apply`
    tests/kube/policy/refused/*.yaml   each must be refused, by the policy (the message names it)

The case exists only when deploy/policy/ does (kustomization.yaml: applied with -k; else every
*.yaml in it with -f). Namespaces the examples name are created first. Objects created are
deleted at the end of the case.
"""
import glob
import json
import os

import cluster as C
from run import CaseFailed, HERE, check

POLICY_DIR = os.path.join(C.ROOT, "deploy", "policy")
EXAMPLES = os.path.join(HERE, "policy")


def _objs(t, path):
    return t.objs(path)


def _policy_objs(t):
    if os.path.exists(os.path.join(POLICY_DIR, "kustomization.yaml")):
        return t.objs(text=t.k("kustomize", POLICY_DIR).stdout)
    out = []
    for f in sorted(glob.glob(os.path.join(POLICY_DIR, "*.yaml"))):
        out += _objs(t, f)
    return out


def case_admission_policy(t):
    """deploy/policy applied; every tests/kube/policy/allowed example is created, every
    refused one is refused by a flexvol policy (the message names it)."""
    objs = _policy_objs(t)
    names = [o["metadata"]["name"] for o in objs if o["kind"] == "ValidatingAdmissionPolicy"]
    check(names, f"no ValidatingAdmissionPolicy in {POLICY_DIR}")
    if os.path.exists(os.path.join(POLICY_DIR, "kustomization.yaml")):
        t.k("apply", "-k", POLICY_DIR)
    else:
        t.k("apply", "-f", POLICY_DIR)
    allowed = sorted(glob.glob(os.path.join(EXAMPLES, "allowed", "*.yaml")))
    refused = sorted(glob.glob(os.path.join(EXAMPLES, "refused", "*.yaml")))
    check(allowed and refused, f"examples missing: {len(allowed)} allowed, {len(refused)} refused in {EXAMPLES}")
    for f in allowed + refused:
        for o in _objs(t, f):
            ns = o["metadata"].get("namespace")
            if ns and t.k("get", "ns", ns, check=False).returncode != 0:
                t.k("create", "ns", ns)
    created = []
    problems = []
    try:
        # the API server starts enforcing a new policy within a few seconds (its informer):
        # wait until the first refused example is refused before judging the rest
        try:
            C.wait_for("the policy enforced", lambda: t.k("apply", "--dry-run=server", "-f", refused[0],
                                                           check=False).returncode != 0, 30, 1)
        except TimeoutError:
            pass
        for f in refused:
            r = t.k("apply", "-f", f, check=False)
            if r.returncode == 0:
                problems.append(f"{os.path.basename(f)}: created, should be refused")
                created.append(f)
            elif not any(n in r.stderr for n in names):
                problems.append(f"{os.path.basename(f)}: refused, but not by {names}: {r.stderr.strip()}")
        for f in allowed:
            r = t.k("apply", "-f", f, check=False)
            if r.returncode != 0:
                problems.append(f"{os.path.basename(f)}: refused, should be created: {r.stderr.strip()}")
            else:
                created.append(f)
    finally:
        for f in created:
            t.k("delete", "-f", f, "--wait=false", "--ignore-not-found", check=False)
        if os.path.exists(os.path.join(POLICY_DIR, "kustomization.yaml")):
            t.k("delete", "-k", POLICY_DIR, "--ignore-not-found", check=False)
        else:
            t.k("delete", "-f", POLICY_DIR, "--ignore-not-found", check=False)
    if problems:
        raise CaseFailed("; ".join(problems))


CASES = [case_admission_policy] if os.path.isdir(POLICY_DIR) else []
if not CASES:
    print(f"note: no {os.path.relpath(POLICY_DIR, C.ROOT)}/ in this tree: the admission-policy case is not run")
