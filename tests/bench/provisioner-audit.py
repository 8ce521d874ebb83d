#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Where a scale run's time went per claim, from the API server's audit log.

    python3 tests/bench/provisioner-audit.py AUDIT_LOG PROVISIONER_LOG [--ns bench]

tests/bench/provisioner-scale.py calls breakdown() on its own run (and keeps the logs with
--keep); this runs it on kept logs.  Times are the API server's (requestReceivedTimestamp,
stageTimestamp), so they compare across processes.  Per provisioned claim of namespace --ns:

- handover: the controller-manager's first update of the claim (the storage-provisioner
  annotation) done -> the provisioner's first request for it: the watch event's way to a free
  worker (the queue's wait);
- each of the provisioner's requests for the claim in order (the Provisioning event, the
  finalizer patch, the PV create, the ProvisioningSucceeded event, the finalizer's removal):
  the server's time for it, and the provisioner's own time before it (since its previous
  request for the claim was answered: the storage child's fork/exec and work sits before the PV
  create);
- busy: the provisioner's first request for the claim received -> its last answered.

Also: the most claims with a request in flight at once (the workers working), and the
requests per provisioned claim by kind.
"""

import collections
import datetime
import json
import re
import sys

PV_MADE = re.compile(r'object="([^"/]+)/([^"]+)" kind="PersistentVolumeClaim" type="Normal" '
                     r'reason="ProvisioningSucceeded" message="Successfully provisioned volume '
                     r'(pvc-[0-9a-f-]+)')


def ts(s):
    """RFC 3339 with microseconds (the audit log's) to seconds since the epoch."""
    return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")


def breakdown(audit_path, prov_log_path, ns="bench"):
    """The figures above as a dict (seconds, median / p90 / max)."""
    pv_of = {}  # PV name -> claim name
    with open(prov_log_path, errors="replace") as f:
        for line in f:
            m = PV_MADE.search(line)
            if m and m.group(1) == ns:
                pv_of[m.group(3)] = m.group(2)
    handover = {}
    reqs = collections.defaultdict(list)  # claim -> [(received, done, what)]
    with open(audit_path, errors="replace") as f:
        for line in f:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            ref = e.get("objectRef") or {}
            ua = e.get("userAgent", "")
            res, name = ref.get("resource"), ref.get("name") or ""
            if ua.startswith("kube-controller-manager") and e.get("verb") == "update" and \
                    res == "persistentvolumeclaims" and ref.get("namespace") == ns and \
                    not ref.get("subresource") and name not in handover:
                handover[name] = ts(e["stageTimestamp"])
            if not ua.startswith("flexvol-provisioner"):
                continue
            if res == "persistentvolumes" and e.get("verb") == "create":
                claim, what = pv_of.get(name), "PV create"
            elif res == "persistentvolumeclaims" and ref.get("namespace") == ns:
                claim, what = name, "claim " + e.get("verb", "?")
            elif res == "events" and ref.get("namespace") == ns:
                claim, what = name.rsplit(".", 1)[0], "event"
            else:
                continue
            if claim:
                reqs[claim].append((ts(e["requestReceivedTimestamp"]), ts(e["stageTimestamp"]),
                                    what))
    steps = collections.defaultdict(lambda: {"server": [], "before": [], "at": []})
    wait, busy, spans = [], [], []
    for claim in pv_of.values():
        rs = sorted(reqs.get(claim, []))
        if not rs:
            continue
        if claim in handover:
            wait.append(rs[0][0] - handover[claim])
        busy.append(rs[-1][1] - rs[0][0])
        spans.append((rs[0][0], rs[-1][1]))
        seen = collections.Counter()
        prev = None
        for i, (rcv, done, what) in enumerate(rs):
            seen[what] += 1
            key = "%s #%d" % (what, seen[what])
            steps[key]["at"].append(i)
            steps[key]["server"].append(done - rcv)
            if prev is not None:
                steps[key]["before"].append(rcv - prev)
            prev = done

    def fig(v):
        return {"n": len(v), "median": round(pct(v, 0.5), 3), "p90": round(pct(v, 0.9), 3),
                "max": round(max(v), 3) if v else None, "sum": round(sum(v), 1)}

    # the most claims in the works at once (their spans overlapping)
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    cur = most = 0
    for _, d in edges:
        cur += d
        most = max(most, cur)
    out = {"claims": len(pv_of), "handover_to_first_request": fig(wait),
           "first_to_last_request": fig(busy), "most_claims_at_once": most, "steps": {}}
    for key in sorted(steps, key=lambda k: (sum(steps[k]["at"]) / len(steps[k]["at"]), k)):
        out["steps"][key] = {"server": fig(steps[key]["server"]),
                             "provisioner_before": fig(steps[key]["before"])}
    if spans:
        out["first_request_to_last_answer_s"] = round(max(b for _, b in spans) -
                                                      min(a for a, _ in spans), 1)
    return out


def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("audit")
    ap.add_argument("log")
    ap.add_argument("--ns", default="bench")
    a = ap.parse_args()
    print(json.dumps(breakdown(a.audit, a.log, a.ns), indent=1))


if __name__ == "__main__":
    sys.exit(main())
