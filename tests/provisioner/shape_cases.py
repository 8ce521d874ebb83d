# SPDX-License-Identifier: Apache-2.0
"""Object shapes of the provisioner's integration test (run.py registers them; issue 24).

The API server stores what it accepts, not what a careful client writes: an
empty map or list is dropped, optional fields are absent or null, strings
reach their maximum length, quantities come in every form the grammar has.
Each case is one family of shapes, as a table; every row is either
provisioned correctly or refused with a ProvisioningFailed event whose
message says what to change, and the provisioner is still the same process
at the end (no crash, no restart).
"""

import os
import time

LOOP = "flexvol/loop"
NFS = "flexvol/nfs"
MiB = 1024 * 1024
SELECTED = "volume.kubernetes.io/selected-node"


def register(R):
    case, check, wait_for = R.case, R.check, R.wait_for

    def outcome(e, c):
        """'pv' (provisioned and bound), ('failed', message), or None (nothing yet)."""
        if e.pv_of(c) is not None:
            return "pv" if e.bound(c) else None
        ev = e.events(c, "ProvisioningFailed")
        return ("failed", ev[0]["message"]) if ev else None

    def expect(e, rows):
        """rows: (claim, want) with want "pv", "none" (left alone: no PV, no event) or the
        text a ProvisioningFailed message must hold.  Checks every row, then that the
        provisioner processes still run."""
        for c, want in rows:
            name = c["metadata"]["name"]
            if want == "none":
                continue
            got = wait_for(lambda c=c: outcome(e, c), "an outcome for claim %s" % name, 20)
            if want == "pv":
                check(got == "pv", "claim %s provisioned: %r" % (name, got))
            else:
                check(got != "pv" and want in got[1],
                      "claim %s refused saying '%s': %r" % (name, want, got))
                check(e.pv_of(c) is None, "no PV for the refused claim %s" % name)
        time.sleep(1)
        for c, want in rows:
            if want == "none":
                check(e.pv_of(c) is None and not e.events(c, "ProvisioningFailed"),
                      "claim %s left alone: %r" % (c["metadata"]["name"], e.events(c)))
        for i, p in enumerate(e.procs):
            check(p.poll() is None, "provisioner %d still running (exit %r)" % (i, p.poll()))
        check("SIGSEGV" not in e.all_logs() and "Assertion" not in e.all_logs(), "no crash logged")

    def raw_sc(e, name, provisioner=NFS, **fields):
        o = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
             "metadata": {"name": name}, "provisioner": provisioner}
        o.update(fields)
        return e.st.put("storageclasses", o)

    def node(e, name, meta=None, status=True):
        o = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
        o["metadata"].update(meta or {})
        if status:
            o["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
        return e.st.put("nodes", o)

    def report(e, name, data):
        o = {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": name, "namespace": "flexvol-loop"}}
        if data is not None:
            o["data"] = data
        return e.st.put("configmaps", o)

    def fresh(free=1 << 30):
        return {"free": str(free), "time": str(int(time.time())), "root": "/x"}

    def loop_claim(e, name, nodename, size="64Mi", **kw):
        ann = {SELECTED: nodename} if nodename is not None else {}
        return e.pvc(name, sc="loop", size=size, modes=kw.pop("modes", ("ReadWriteOnce",)),
                     provisioner=LOOP, annotations=ann, **kw)

    def loop_class(e, name="loop"):
        return raw_sc(e, name, LOOP, volumeBindingMode="WaitForFirstConsumer")

    @case
    def shapes_nfs_classes(e):
        """flexvol/nfs classes as the API server stores them: parameters absent, null or empty
        (refused: server and share are required), empty lists present, every optional field
        absent, names and values of the maximum length, unicode"""
        ok = {"server": "nfs.example.com", "share": "/export"}
        long_host = ".".join(["a" * 63] * 3 + ["b" * 61])  # 253 bytes, a valid DNS name
        rows = [
            ("noparams", {}, "'server' is required"),
            ("nullparams", {"parameters": None}, "'server' is required"),
            ("emptyparams", {"parameters": {}}, "'server' is required"),
            ("emptylists", {"parameters": ok, "mountOptions": [], "allowedTopologies": []}, "pv"),
            ("nulls", {"parameters": ok, "mountOptions": None, "reclaimPolicy": None,
                       "volumeBindingMode": None, "allowVolumeExpansion": None}, "pv"),
            ("retain", {"parameters": ok, "reclaimPolicy": "Retain"}, "pv"),
            ("longhost", {"parameters": {"server": long_host, "share": "/export"}}, "pv"),
            ("unicode", {"parameters": {"server": "nfs-\u00e9t\u00e9.example", "share": "/x"}},
             "server"),
            ("unicodeshare", {"parameters": {"server": "s", "share": "/d\u00e9j\u00e0"}}, "share"),
            ("n" * 253, {"parameters": ok}, "pv"),
        ]
        for name, fields, _ in rows:
            raw_sc(e, name, **fields)
        e.start()
        expect(e, [(e.pvc("c%d" % i, sc=name, provisioner=NFS), want)
                   for i, (name, _, want) in enumerate(rows)])

    @case
    def shapes_claims(e):
        """claims as the API server stores them: quantities 1, 100m, 1Ei, 16Ei; volumeMode
        Block or absent; ReadWriteOncePod; a dataSourceRef to another populator; no
        accessModes, no resources; no labels, annotations or status; names of the maximum
        length (the default pathPattern cannot hold them: the message says what to change);
        unicode in an annotation the pattern uses"""
        e.sc()
        e.sc(name="byann", params={"server": "s", "share": "/x",
                                   "pathPattern": "${namespace}/${.PVC.annotations.team}"})
        e.start()
        rows = []

        def claim(name, want, **kw):
            rows.append((e.pvc(name, provisioner=NFS, **kw), want))
            return rows[-1][0]

        claim("one", "pv", size="1")
        claim("milli", "pv", size="100m")
        claim("exa", "pv", size="1Ei")
        claim("block", "volumeMode Block", spec={"volumeMode": "Block"})
        claim("nomode", "pv", spec={"volumeMode": None})
        claim("oncepod", "pv", modes=("ReadWriteOncePod",))
        claim("populated", "none", spec={"dataSourceRef": {"apiGroup": "populator.example.com",
                                                           "kind": "Seed", "name": "s"}})
        claim("nomodes", "accessModes", spec={"accessModes": None})
        claim("noresources", "storage size", spec={"resources": None})
        claim("emptyresources", "storage size", spec={"resources": {}})
        claim("selectornull", "pv", spec={"selector": None, "dataSource": None,
                                          "dataSourceRef": None})
        bare = claim("bare", "pv")
        del bare["metadata"]["labels"]
        del bare["status"]
        e.st.put("persistentvolumeclaims", bare)
        claim("x" * 253, "shorter", ns="n" * 63)
        claim("team", "may only hold", sc="byann", annotations={"team": "\u00e9quipe"})
        claim("beta", "pv", sc=None, annotations={"volume.beta.kubernetes.io/storage-class": "nfs"})
        expect(e, rows)
        pv = e.pv_of(rows[5][0])
        check(pv["spec"]["accessModes"] == ["ReadWriteOncePod"], "RWOP kept: %r" % pv["spec"])
        check(e.pv_of(rows[0][0])["spec"]["capacity"] == {"storage": "1"}, "capacity as asked")

    @case
    def loop_shapes_claims(e):
        """flexvol/loop claims: quantities 1, 100m and 1.5Mi are whole MiB (rounded up); 1Ei
        does not fit the node; 16Ei and 2^64-1 bytes are refused as too large (2^64-1 was
        rounded up past 2^64 to a 0-byte volume), as a resize to 2^64-1; Block refused"""
        raw_sc(e, "loop", LOOP, volumeBindingMode="WaitForFirstConsumer", allowVolumeExpansion=True)
        node(e, "node-a", {"labels": {"kubernetes.io/hostname": "node-a"}})
        report(e, "node-a", fresh(1 << 40))
        e.start("--provisioners", LOOP)
        rows = [(loop_claim(e, "one", "node-a", size="1"), "pv"),
                (loop_claim(e, "milli", "node-a", size="100m"), "pv"),
                (loop_claim(e, "half", "node-a", size="1.5Mi"), "pv"),
                (loop_claim(e, "exa", "node-a", size="1Ei"), "no room"),
                (loop_claim(e, "over", "node-a", size="16Ei"), "too large"),
                (loop_claim(e, "max", "node-a", size="18446744073709551615"), "too large"),
                (loop_claim(e, "block", "node-a", spec={"volumeMode": "Block"}), "volumeMode Block"),
                (loop_claim(e, "oncepod", "node-a", modes=("ReadWriteOncePod",)), "pv")]
        expect(e, rows)
        for c, mib in ((rows[0][0], 1), (rows[1][0], 1), (rows[2][0], 2)):
            fx = e.pv_of(c)["spec"]["flexVolume"]["options"]
            check(fx["size"] == str(mib * MiB), "%s: %r" % (c["metadata"]["name"], fx))
        # growing a bound claim to 2^64-1 bytes: refused as too large (it rounded up past
        # 2^64 to 0 and was called a shrink)
        grow = e.claim("one")
        grow["spec"]["resources"]["requests"]["storage"] = "18446744073709551615"
        e.st.put("persistentvolumeclaims", grow)
        ev = wait_for(lambda: e.events(grow, "VolumeResizeFailed"), "VolumeResizeFailed")
        check("more than a volume can hold" in ev[0]["message"], "resize: %s" % ev[0]["message"])
        check(e.procs[0].poll() is None, "still running")

    @case
    def loop_shapes_nodes(e):
        """the selected node: absent (refused, handed back), without labels, without status,
        without metadata beyond its name (provisioned, pinned by name), a name the API
        would not take (refused, named)"""
        loop_class(e)
        node(e, "bare", status=False)
        node(e, "nolabels", {"labels": None, "annotations": None})
        node(e, "nostatus", {"labels": {"kubernetes.io/hostname": "h-nostatus"}}, status=False)
        node(e, "n" * 63)
        for n in ("bare", "nolabels", "nostatus", "n" * 63):
            report(e, n, fresh())
        e.start("--provisioners", LOOP)
        rows = [(loop_claim(e, "gone", "node-gone"), "node-gone does not exist"),
                (loop_claim(e, "bare", "bare"), "pv"),
                (loop_claim(e, "nolabels", "nolabels"), "pv"),
                (loop_claim(e, "nostatus", "nostatus"), "pv"),
                (loop_claim(e, "longname", "n" * 63), "pv"),
                (loop_claim(e, "badname", "Node_A"), "Node_A"),
                (loop_claim(e, "emptyname", ""), "selected node")]
        expect(e, rows)
        host = lambda c: e.pv_of(c)["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0][
            "matchExpressions"][0]["values"]
        check(host(rows[1][0]) == ["bare"] and host(rows[3][0]) == ["h-nostatus"],
              "pinned by hostname label, else by name")

    @case
    def loop_shapes_reports(e):
        """node space reports missing, without data, with free space negative or not a
        number, with a time not a number, far in the past, in the future or at the edge of
        the 64-bit range: refused, the message names what is wrong; a garbled image record
        does not stop a claim that fits"""
        loop_class(e)
        now = int(time.time())
        rows = [("missing", None, "has not reported"),
                ("nodata", {}, "ConfigMap flexvol-loop/nodata"),
                ("negfree", dict(fresh(), free="-5"), "free"),
                ("wordfree", dict(fresh(), free="lots"), "free"),
                ("wordtime", dict(fresh(), time="soon"), "time"),
                ("oldtime", dict(fresh(), time=str(now - 3600)), "stale"),
                ("future", dict(fresh(), time=str(now + 3600)), "future"),
                ("minint", dict(fresh(), time="-9223372036854775808"), "time"),
                ("maxint", dict(fresh(), time="9223372036854775807"), "future"),
                ("garbled", dict(fresh(), **{"pvc-x.img": "x y", "pvc-y.img": "-1 -1"}), "pv")]
        for n, data, _ in rows:
            node(e, n, {"labels": {"kubernetes.io/hostname": n}})
            if n != "missing":
                report(e, n, data)
        e.start("--provisioners", LOOP)
        expect(e, [(loop_claim(e, "c-" + n, n), want) for n, _, want in rows])

    @case
    def shapes_leases(e):
        """Leases another holder left, as the API server stores them: no spec, null fields, a
        holderIdentity of 1000 bytes of unicode, leaseTransitions at the int32 maximum: each
        taken over by a replica with leader election, its transitions still an int32 that is
        not negative (it wrapped to -2^31, which the API server refuses), the replica alive"""
        old = "2020-01-01T00:00:00.000000Z"
        rows = {
            "nospec": None,
            "nulls": {"holderIdentity": None, "leaseDurationSeconds": None,
                      "leaseTransitions": None, "renewTime": None},
            "longholder": {"holderIdentity": "\u00e9" * 500, "leaseDurationSeconds": 1,
                           "renewTime": old, "leaseTransitions": 3},
            "maxtransitions": {"holderIdentity": "gone", "leaseDurationSeconds": 1,
                               "renewTime": old, "leaseTransitions": 2147483647},
        }
        for name, spec in rows.items():
            o = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                 "metadata": {"name": name, "namespace": "default"}}
            if spec is not None:
                o["spec"] = spec
            e.st.put("leases", o)
        e.sc()
        for name in rows:
            e.start("--leader-election-identity", "me-" + name, "--leader-election-name", name,
                    "--leader-election-namespace", "default",
                    "--leader-election-lease-duration", "3", "--leader-election-renew-deadline",
                    "2", "--leader-election-retry-period", "1")
        for name in rows:
            lease = wait_for(lambda n=name: (lambda l: l if (l.get("spec") or {}).get(
                "holderIdentity") == "me-" + n else None)(e.st.get("leases", n, "default")),
                "replica me-%s takes Lease %s" % (name, name), 20)
            t = lease["spec"].get("leaseTransitions")
            check(isinstance(t, int) and 0 <= t <= 2147483647,
                  "Lease %s: leaseTransitions %r" % (name, t))
        expect(e, [(e.pvc("led"), "pv")])

    @case
    def shapes_pvs(e):
        """Released PVs of flexvol/nfs as the API stores hand-made or edited ones: no spec, no
        status, no claimRef, no flexVolume or options, a subPath outside the share, a
        capacity of 1Ei: the directory is not touched, a VolumeFailedDelete event says why
        where there is something to fix, the PV is kept, the provisioner runs on"""
        fin = ["external-provisioner.volume.kubernetes.io/finalizer"]
        opts = {"server": "nfs.example.com", "share": "/export/k8s", "subPath": "kept"}
        full = {"persistentVolumeReclaimPolicy": "Delete", "capacity": {"storage": "1Gi"},
                "claimRef": {"namespace": "default", "name": "gone", "uid": "u-1"},
                "flexVolume": {"driver": NFS, "options": dict(opts)}}
        rows = [
            ("nospec", None, {"phase": "Released"}, None),
            ("nostatus", full, None, None),
            ("noclaimref", dict(full, claimRef=None), {"phase": "Released"}, "claimRef"),
            ("noflex", dict(full, flexVolume=None), {"phase": "Released"}, None),
            ("nooptions", dict(full, flexVolume={"driver": NFS}), {"phase": "Released"}, None),
            ("outside", dict(full, flexVolume={"driver": NFS, "options": dict(
                opts, subPath="../etc")}), {"phase": "Released"}, "not a directory"),
            ("exa", dict(full, capacity={"storage": "1Ei"}, claimRef=dict(
                full["claimRef"], uid=None)), {"phase": "Released"}, "claimRef"),
        ]
        os.makedirs(os.path.join(e.root, "kept"))
        e.sc()
        pvs = []
        for name, spec, status, _ in rows:
            o = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {
                "name": "pv-" + name, "finalizers": list(fin),
                "annotations": {"pv.kubernetes.io/provisioned-by": NFS}}}
            if spec is not None:
                o["spec"] = spec
            if status is not None:
                o["status"] = status
            pvs.append(e.st.put("persistentvolumes", o))
        e.start()
        for pv, (name, _, _, why) in zip(pvs, rows):
            if why:
                ev = wait_for(lambda pv=pv: e.events(pv, "VolumeFailedDelete"),
                              "VolumeFailedDelete for PV %s" % name)
                check(why in ev[0]["message"], "PV %s: the event says why (%s): %s" % (
                    name, why, ev[0]["message"]))
        time.sleep(1.5)
        check(os.path.isdir(os.path.join(e.root, "kept")), "the directory is not touched")
        for pv, (name, _, _, _) in zip(pvs, rows):
            check(e.st.get("persistentvolumes", "pv-" + name) is not None, "PV %s kept" % name)
        expect(e, [(e.pvc("after"), "pv")])

    @case
    def shapes_api_answers(e):
        """answers of HTTP 200 that are JSON but no object (an array, a string, null), as a
        proxy in front of the API server may give: the Lease read by a replica, the space
        report re-read by the node agent; each is an API error (logged, retried), never an
        abort (json_object_object_add() asserted on an array: SIGABRT)"""
        e.sc()
        root = os.path.join(e.tmp, "loop-node-a")
        os.makedirs(root)
        e.st.put("configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": "node-a", "namespace": "flexvol-loop"}, "data": {"free": "1"}})
        e.st.raw_get["/apis/coordination.k8s.io/v1/namespaces/default/leases/odd"] = "[]"
        e.st.raw_get["/api/v1/namespaces/flexvol-loop/configmaps/node-a"] = '["x"]'
        e.start("--leader-election-identity", "me", "--leader-election-name", "odd",
                "--leader-election-namespace", "default")
        e.start("--node-agent", "--node", "node-a", "--loop-root", root, "--interval", "1")
        time.sleep(3)
        e.st.raw_get.clear()
        wait_for(lambda: (e.st.get("leases", "odd", "default") or {}).get("spec", {}).get(
            "holderIdentity") == "me", "the Lease taken once it reads as one", 30)
        wait_for(lambda: "time" in e.st.get("configmaps", "node-a", "flexvol-loop")["data"],
                 "the agent's report published once the ConfigMap reads as one", 30)
        expect(e, [(e.pvc("after"), "pv")])
