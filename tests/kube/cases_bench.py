# SPDX-License-Identifier: Apache-2.0
"""Cluster-lane bench (issue 41.4; make bench-kube-pods, outside CI): pods through CSI started in
parallel, against the same through FlexVolume.

A round, each way: N claims of N fresh loop volumes (64Mi ext4, WaitForFirstConsumer) and N
pods using them, made by one request; the time from that request until every pod is Running
(polled every 0.25 s), and each pod's own, then everything deleted and the images gone before
the next.  FlexVolume: deploy/loop's class flexvol-loop (flexvol-provisioner and its node agent;
the kubelet execs each call, calls of distinct volumes in parallel processes; attach through the
controller-manager). CSI: deploy/csi/controller's class flexvol-csi-loop (external-provisioner
on the node, then NodeStageVolume and NodePublishVolume on flexvol-csi's one endpoint). Which
way goes first alternates by round; each way needs its own install (the lane switches between
them), so the rounds are paired by round, not by pod. Nothing here asserts speed: a pod that
does not start fails the case. FLEXVOL_BENCH_PODS (16) and FLEXVOL_BENCH_ROUNDS (3) change the
sizes; the figures go to docs/benchmarks.md.
"""
import json
import os
import statistics
import time

import cases_csi as CSI
import cases_loopprov as LP
import cluster as C
from run import NS, T, CaseFailed

LABEL = "flexvol-bench"
PODS = int(os.environ.get("FLEXVOL_BENCH_PODS", "16"))
ROUNDS = int(os.environ.get("FLEXVOL_BENCH_ROUNDS", "3"))
FIRST = os.environ.get("FLEXVOL_BENCH_FIRST", "FlexVolume")  # the way of round 1
WAYS = {"FlexVolume": ("flexvol-loop", lambda t: LP._setup(t)),
        "CSI": ("flexvol-csi-loop", lambda t: CSI._setup(t, "csi-controller"))}


def _objects(way, sc):
    items = []
    for i in range(PODS):
        name = f"bench-{way.lower()}-{i}"
        items.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                      "metadata": {"name": name, "namespace": NS, "labels": {LABEL: way}},
                      "spec": {"storageClassName": sc, "accessModes": ["ReadWriteOnce"],
                               "resources": {"requests": {"storage": "64Mi"}}}})
        pod = T.pod_obj(name, "sleep 3600", claim=name)
        pod["metadata"]["labels"] = {LABEL: way}
        items.append(pod)
    return {"apiVersion": "v1", "kind": "List", "items": items}


def _one(t, way):
    """(seconds until the last pod was Running, [each pod's seconds])."""
    sc, setup = WAYS[way]
    setup(t)
    objs = json.dumps(_objects(way, sc))
    t0 = time.monotonic()
    t.k("apply", "-f", "-", input=objs)
    seen = {}
    end = t0 + 300
    while len(seen) < PODS:
        if time.monotonic() > end:
            raise CaseFailed(f"{way}: {len(seen)} of {PODS} pods Running after 300 s: "
                             f"{t.pod_debug(next(iter(set(_names(way)) - set(seen))))}")
        now = time.monotonic()
        for p in t.kj("get", "pods", "-n", NS, "-l", f"{LABEL}={way}")["items"]:
            if p.get("status", {}).get("phase") == "Running":
                seen.setdefault(p["metadata"]["name"], now - t0)
            elif p.get("status", {}).get("phase") == "Failed":
                raise CaseFailed(f"{way}: pod {p['metadata']['name']} failed: {t.pod_debug(p['metadata']['name'])}")
        time.sleep(0.25)
    _clean(t, way)
    return max(seen.values()), sorted(seen.values())


def _names(way):
    return [f"bench-{way.lower()}-{i}" for i in range(PODS)]


def _clean(t, way):
    t.k("delete", "pods", "-n", NS, "-l", f"{LABEL}={way}", "--grace-period=1", "--wait=true",
        "--timeout=180s", timeout=210)
    t.k("delete", "pvc", "-n", NS, "-l", f"{LABEL}={way}", "--wait=true", "--timeout=180s", timeout=210)
    # reclaim Delete: the PVs (and their images) go; the next round starts from none
    C.wait_for(f"{way}'s volumes deleted", lambda: not [
        pv for pv in t.kj("get", "pv")["items"]
        if (pv["spec"].get("claimRef") or {}).get("name", "").startswith(f"bench-{way.lower()}-")], 300, 1)


def case_bench_pods_parallel(t):
    """PODS pods with PODS fresh loop claims on one node, all made at once: seconds until all are
    Running through FlexVolume and through CSI, ROUNDS rounds, every round printed."""
    rows = []
    try:
        for r in range(ROUNDS):
            other = "CSI" if FIRST == "FlexVolume" else "FlexVolume"
            order = (FIRST, other) if r % 2 == 0 else (other, FIRST)
            row = {w: _one(t, w) for w in order}
            rows.append(row)
            f, c = row["FlexVolume"], row["CSI"]
            print(f"bench round {r + 1} ({order[0]} first): {PODS} pods Running: FlexVolume "
                  f"{f[0]:.1f} s (median pod {statistics.median(f[1]):.1f} s), CSI {c[0]:.1f} s "
                  f"(median pod {statistics.median(c[1]):.1f} s): CSI/FlexVolume {c[0] / f[0]:.2f}",
                  flush=True)
    finally:
        for w in WAYS:
            t.k("delete", "pods,pvc", "-n", NS, "-l", f"{LABEL}={w}", "--grace-period=1", "--wait=false",
                check=False)
    ratios = [row["CSI"][0] / row["FlexVolume"][0] for row in rows]
    print(f"bench: {PODS} pods, {ROUNDS} rounds: all Running, median of rounds: FlexVolume "
          f"{statistics.median(r['FlexVolume'][0] for r in rows):.1f} s, CSI "
          f"{statistics.median(r['CSI'][0] for r in rows):.1f} s; median of the paired ratios "
          f"CSI/FlexVolume {statistics.median(ratios):.2f}", flush=True)


# only when asked (make bench-kube-pods): a bench, not a check
CASES = [case_bench_pods_parallel] if os.environ.get("FLEXVOL_KUBE_BENCH") == "1" else []
