# SPDX-License-Identifier: Apache-2.0
"""`migrate` and the provisioner (issue 37 point 6): cases of the provisioner's integration test
(run.py registers them).

A PV made by flexvol-provisioner, moved to CSI by migrate and back, against the fake API server,
with the real flexvol-provisioner (controller and loop node agent), the real migrate, and, for
the CSI side, the real flexvol-csi (its Controller service's DeleteVolume, through csi-call)
driven by a model of external-provisioner's reclaim (ExtProv below).  What each case checks:
migrate finishes whether or not the provisioner runs; after a move exactly one side reclaims
the volume (its PV annotation says which), and nothing hangs.

The CSI cases need build/flexvol-csi (make csi) and tests/csi's csi-call (tests/csi/build);
without them they are skipped, and said so.
"""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid

NFS = "flexvol/nfs"
LOOP = "flexvol/loop"
FIN = "external-provisioner.volume.kubernetes.io/finalizer"
PROTECTION = "kubernetes.io/pv-protection"
BY = "pv.kubernetes.io/provisioned-by"
SERVER, SHARE = "nfs.example.com", "/export/k8s"
OWNER = "trusted.flexvol.owner"
HERE = os.path.dirname(os.path.abspath(__file__))


def csi_call_path():
    """tests/csi's gRPC client, when it has been built (never built here)."""
    p = os.environ.get("FLEXVOL_CSI_CALL")
    if not p:
        r = subprocess.run([os.path.join(HERE, "..", "csi", "build"), "--print"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        p = os.path.join(os.path.dirname(r.stdout.strip()), "csi-call") if r.returncode == 0 else ""
    return p if p and os.access(p, os.X_OK) else None


class Endpoint:
    """flexvol-csi --driver @driver on a socket of its own (the Controller service the CSI
    controller Deployment or DaemonSet runs); nfs on @root as the share's mount, loop on @root as
    the node's loop root."""

    def __init__(self, build, call, tmp, driver, root, node="node-a"):
        self.call_bin = call
        self.dir = tempfile.mkdtemp(prefix="csi-" + driver + "-", dir=tmp)
        self.sock = os.path.join(self.dir, "csi.sock")
        for d in ("state", "run"):
            os.mkdir(os.path.join(self.dir, d))
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "FLEXVOL_CONFIG": "/dev/null",
               "FLEXVOL_LOOP_ROOT": root, "FLEXVOL_STATE_DIR": os.path.join(self.dir, "state"),
               "FLEXVOL_RUN_DIR": os.path.join(self.dir, "run"),
               "FLEXVOL_LOG_FILE": os.path.join(self.dir, "driver.log"), "FLEXVOL_NODE_NAME": node}
        self.log = open(os.path.join(self.dir, "endpoint.log"), "w")
        self.proc = subprocess.Popen(
            [os.path.join(build, "flexvol-csi"), "--endpoint", "unix://" + self.sock, "--driver", driver,
             *(["--root", root, "--share", SERVER + ":" + SHARE] if driver == "nfs" else [])],
            env=env, stdout=self.log, stderr=self.log)
        end = time.monotonic() + 10
        while not os.path.exists(self.sock):
            if time.monotonic() > end or self.proc.poll() is not None:
                raise AssertionError("flexvol-csi --driver %s did not start" % driver)
            time.sleep(0.05)

    def call(self, method, req):
        """(grpc code, answer or message)"""
        r = subprocess.run([self.call_bin, "-endpoint", "unix://" + self.sock,
                            "/csi.v1.Controller/" + method, json.dumps(req)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        if r.returncode == 0:
            return 0, json.loads(r.stdout)
        if r.returncode >= 100:
            return r.returncode - 100, r.stderr.strip()
        raise AssertionError("csi-call failed: %s" % r.stderr)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=30)
        self.log.close()


class ExtProv:
    """external-provisioner's part in a PV's life (csi-provisioner v6.4 on
    sig-storage-lib-external-provisioner v13.1, the versions the cluster lane runs), driving
    flexvol-csi's DeleteVolume:
    - its PVs: pv.kubernetes.io/provisioned-by (or migrated-to) names its driver; a PV without
      that annotation when it is a CSI PV of its driver (isProvisionerForVolume);
    - the finalizer: added to a Bound PV of policy Delete not being deleted, removed from one
      of Retain (handleProtectionFinalizer);
    - a Released PV of policy Delete (one being deleted only while it has the finalizer):
      DeleteVolume(volumeHandle), then the PV deleted, then the finalizer removed; with
      --node-deployment (@node) only when the PV's nodeAffinity matches the node's topology
      (VolumeIsAccessible), else ignored."""

    def __init__(self, e, driver, ep=None, node=None):
        self.e, self.driver, self.ep, self.node = e, driver, ep, node
        self.errors = []

    def owns(self, pv):
        ann = pv["metadata"].get("annotations") or {}
        if BY in ann:
            return self.driver in (ann[BY], ann.get("pv.kubernetes.io/migrated-to"))
        return (pv["spec"].get("csi") or {}).get("driver") == self.driver

    def accessible(self, pv):
        terms = ((pv["spec"].get("nodeAffinity") or {}).get("required") or {}).get("nodeSelectorTerms")
        if self.node is None or terms is None:
            return True
        labels = {"topology.%s/node" % self.driver: self.node}
        for t in terms:
            exprs = t.get("matchExpressions") or []
            if exprs and all(x["operator"] == "In" and labels.get(x["key"]) in x.get("values", [])
                             for x in exprs):
                return True
        return False

    def _fins(self, pv, fins):
        pv["metadata"]["finalizers"] = fins
        self.e.st.update("persistentvolumes", "", pv["metadata"]["name"], pv)

    def sync(self):
        """One pass over every PV."""
        for pv in self.e.st.items("persistentvolumes"):
            if not self.owns(pv):
                continue
            m, policy = pv["metadata"], pv["spec"].get("persistentVolumeReclaimPolicy")
            fins = list(m.get("finalizers") or [])
            phase = (pv.get("status") or {}).get("phase")
            if policy == "Delete" and not m.get("deletionTimestamp") and phase == "Bound" and FIN not in fins:
                self._fins(pv, fins + [FIN])
                continue
            if policy != "Delete" and FIN in fins:
                self._fins(pv, [f for f in fins if f != FIN])
                continue
            if (m.get("deletionTimestamp") and FIN not in fins) or phase != "Released" or policy != "Delete":
                continue
            if not self.accessible(pv):
                continue
            code, ans = self.ep.call("DeleteVolume", {"volumeId": pv["spec"]["csi"]["volumeHandle"]})
            if code != 0:
                self.errors.append((m["name"], code, ans))
                continue
            self.e.st.api_delete("persistentvolumes", "", m["name"])
            now = self.e.st.get("persistentvolumes", m["name"])
            if now and FIN in (now["metadata"].get("finalizers") or []):
                self._fins(now, [f for f in now["metadata"]["finalizers"] if f != FIN])


def register(R):
    case, check, wait_for, Fail, Skip = R.case, R.check, R.wait_for, R.Fail, R.Skip
    dirname_of = R.dirname_of

    def migrate_argv(e):
        own = os.path.join(e.build, "flexvol-migrate")
        if os.path.exists(own):
            return [own]
        return [os.path.join(e.build, "flexvol-provisioner"), "migrate"]

    def has_root_option(e):
        r = subprocess.run(migrate_argv(e) + ["--help"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        return "--root" in r.stdout

    def migrate(e, pv, rollback=False, root=True, timeout=10, expect=0):
        """Run migrate on @pv (with --root, the share, when asked and it has the option)."""
        e.st.lose_claims = True  # as the PV binder does while the PV is replaced
        argv = migrate_argv(e) + ["--server", e.api.url, "--save", os.path.join(e.tmp, pv + ".json"),
                                  "--timeout", str(timeout)]
        if rollback:
            argv.append("--rollback")
        if root and has_root_option(e):
            argv += ["--root", e.root]
        r = subprocess.run(argv + [pv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=timeout + 60)
        if expect is not None and r.returncode != expect:
            raise Fail("migrate %s%s: exit %d, not %d: %s %s" % (
                pv, " --rollback" if rollback else "", r.returncode, expect, r.stdout.strip(),
                r.stderr.strip()))
        return r

    def saved(e, pv):
        with open(os.path.join(e.tmp, pv + ".json")) as f:
            return json.load(f)

    def pv_now(e, name):
        return e.st.get("persistentvolumes", name)

    def set_policy(e, name, policy):
        pv = pv_now(e, name)
        pv["spec"]["persistentVolumeReclaimPolicy"] = policy
        e.st.update("persistentvolumes", "", name, pv)

    def delete_claim(e, c):
        e.st.api_delete("persistentvolumeclaims", c["metadata"]["namespace"], c["metadata"]["name"])

    def nfs_bound(e, name="data"):
        """A claim of an nfs class (onDelete delete, Delete) provisioned: (claim, PV name, dir)."""
        e.sc(params={"server": SERVER, "share": SHARE, "onDelete": "delete"})
        p = e.start()
        c = e.pvc(name)
        wait_for(lambda: e.bound(c), "claim bound")
        pv = e.pv_of(c)
        wait_for(lambda: FIN in (pv_now(e, pv["metadata"]["name"])["metadata"].get("finalizers") or []),
                 "the provisioner's finalizer on its PV")
        d = pv["spec"]["flexVolume"]["options"]["subPath"]
        with open(os.path.join(e.root, d, "data.txt"), "w") as f:
            f.write("precious")
        return p, c, pv["metadata"]["name"], d

    def node(e, name="node-a"):
        e.st.put("nodes", {"apiVersion": "v1", "kind": "Node",
                           "metadata": {"name": name, "labels": {"kubernetes.io/hostname": "host-a"}}})

    def loop_root(e):
        d = os.path.join(e.tmp, "loop-node-a")
        os.makedirs(d, exist_ok=True)
        return d

    def loop_bound(e, name="data"):
        """A claim of a loop class (Delete) provisioned on node-a by the controller, its image made
        by the node agent: (claim, PV name, image path)."""
        if os.geteuid() != 0:
            raise Skip("needs root (the images' trusted.* owner records)")
        node(e)
        e.st.put("storageclasses", {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                                    "metadata": {"name": "loop"}, "provisioner": LOOP,
                                    "reclaimPolicy": "Delete", "volumeBindingMode": "WaitForFirstConsumer"})
        e.start("--node-agent", "--node", "node-a", "--loop-root", loop_root(e), "--interval", "1")
        wait_for(lambda: e.st.get("configmaps", "node-a", "flexvol-loop"), "the agent's first report")
        e.start("--provisioners", LOOP)
        c = e.pvc(name, sc="loop", size="8Mi", modes=("ReadWriteOnce",), provisioner=LOOP,
                  annotations={"volume.kubernetes.io/selected-node": "node-a"})
        wait_for(lambda: e.bound(c), "claim bound")
        pv = e.pv_of(c)["metadata"]["name"]
        img = os.path.join(loop_root(e), pv + ".img")
        wait_for(lambda: os.path.exists(img), "the agent made the image")
        wait_for(lambda: FIN in (pv_now(e, pv)["metadata"].get("finalizers") or []),
                 "the provisioner's finalizer on its PV")
        return c, pv, img

    def endpoint(e, driver, root):
        if not os.path.exists(os.path.join(e.build, "flexvol-csi")):
            raise Skip("no flexvol-csi in %s (make csi)" % e.build)
        call = csi_call_path()
        if not call:
            raise Skip("no csi-call (tests/csi/build)")
        ep = Endpoint(e.build, call, e.tmp, driver, root)
        e.cleanups.append(ep.stop)
        return ep

    def same_pv(a, b):
        """The PV @a as saved, and @b as the API holds it now: what migrate restores."""
        keep = lambda pv: ({k: v for k, v in pv["metadata"].items()
                            if k in ("name", "labels", "annotations", "finalizers")},
                           {k: v for k, v in pv["spec"].items() if k != "claimRef"},
                           {k: pv["spec"]["claimRef"][k] for k in ("namespace", "name", "uid")})
        ka, kb = keep(a), keep(b)
        ann = dict(ka[0].get("annotations") or {})
        ann.pop("pv.kubernetes.io/bound-by-controller", None)
        ka[0]["annotations"] = ann
        kb[0]["annotations"] = dict(kb[0].get("annotations") or {})
        kb[0]["annotations"].pop("pv.kubernetes.io/bound-by-controller", None)
        return ka == kb

    @case
    def migrate_finishes_with_provisioner_stopped(e):
        """the provisioner's PV (policy Delete: its finalizer) migrated while the provisioner is
        stopped: migrate removes the finalizers our components put on a PV (pv-protection, the
        provisioner's or external-provisioner's) itself, and finishes; rolled back the same
        way from a CSI PV that external-provisioner protected, with nothing running"""
        p, c, pv, d = nfs_bound(e)
        e.kill(p, signal.SIGTERM)
        t0 = time.time()
        migrate(e, pv, timeout=5)
        now = pv_now(e, pv)
        check("csi" in now["spec"] and now["status"]["phase"] == "Bound" and e.bound(c),
              "a bound CSI PV: %s" % now)
        check(time.time() - t0 < 5, "took %.1f s" % (time.time() - t0))
        set_policy(e, pv, "Delete")
        xp = ExtProv(e, "nfs.csi.flexvol")
        # the CSI PV annotated as external-provisioner's (the handover) gets its finalizer;
        # otherwise (today's migrate) it is put there as it would be by a provisioner running
        xp.sync()
        if FIN not in (pv_now(e, pv)["metadata"].get("finalizers") or []):
            o = pv_now(e, pv)
            o["metadata"]["finalizers"] = (o["metadata"].get("finalizers") or []) + [FIN]
            e.st.update("persistentvolumes", "", pv, o)
        migrate(e, pv, rollback=True, timeout=5)
        check("flexVolume" in pv_now(e, pv)["spec"] and e.bound(c), "rolled back, bound")

    @case
    def migrate_nfs_reclaimed_through_csi(e):
        """an nfs PV of the provisioner migrated with --root (the share mounted where migrate
        runs): its directory's owner record and the PV's provisioned-by now name the CSI side
        (volume ID = the directory); set to Delete and its claim deleted, external-provisioner
        reclaims it through flexvol-csi's DeleteVolume: the directory and its record gone, the
        PV gone; the provisioner (running) leaves it alone"""
        ep = endpoint(e, "nfs", e.root)
        p, c, pv, d = nfs_bound(e)
        migrate(e, pv)
        now = pv_now(e, pv)
        check(now["metadata"]["annotations"].get(BY) == "nfs.csi.flexvol", "provisioned-by %s" %
              now["metadata"]["annotations"].get(BY))
        check(now["spec"]["csi"]["volumeHandle"] == d, "volume ID %s, not the directory %s" % (
            now["spec"]["csi"]["volumeHandle"], d))
        check(e.owner_of(d) == d, "owner record names %s" % e.owner_of(d))
        set_policy(e, pv, "Delete")
        xp = ExtProv(e, "nfs.csi.flexvol", ep)
        xp.sync()
        check(FIN in (pv_now(e, pv)["metadata"].get("finalizers") or []), "external-provisioner's finalizer")
        delete_claim(e, c)
        wait_for(lambda: (xp.sync(), pv_now(e, pv) is None)[1],
                 lambda: "the PV reclaimed through CSI (PV %s; DeleteVolume: %s; tree %s)" % (
                     pv_now(e, pv), xp.errors, e.tree()), 20)
        check(e.tree() == [] and e.owner_records() == {}, "left on the share: %s %s" % (
            e.tree(), e.owner_records()))
        check(not e.events(reason="VolumeFailedDelete"), "events %s" % e.events())
        check(p.poll() is None, "the provisioner died")

    @case
    def migrate_nfs_without_root_stays_the_provisioners(e):
        """migrated without --root (the share is not mounted where migrate runs: the record
        cannot be moved), the directory stays the provisioner's: provisioned-by unchanged, so
        external-provisioner leaves the PV alone, and the provisioner reclaims the CSI PV
        (onDelete delete: the directory gone), nothing hangs"""
        p, c, pv, d = nfs_bound(e)
        migrate(e, pv, root=False)
        now = pv_now(e, pv)
        check(now["metadata"]["annotations"].get(BY) == NFS and e.owner_of(d) == c["metadata"]["uid"],
              "still the provisioner's: %s, record %s" % (now["metadata"]["annotations"], e.owner_of(d)))
        set_policy(e, pv, "Delete")
        xp = ExtProv(e, "nfs.csi.flexvol")
        xp.sync()
        wait_for(lambda: FIN in (pv_now(e, pv)["metadata"].get("finalizers") or []),
                 "the provisioner's finalizer")
        delete_claim(e, c)
        wait_for(lambda: (xp.sync(), pv_now(e, pv) is None)[1],
                 lambda: "the PV reclaimed (PV %s; tree %s; events %s)" % (
                     pv_now(e, pv), e.tree(), [x["message"] for x in e.events()]), 20)
        check(e.tree() == [] and e.owner_records() == {}, "left on the share: %s" % e.tree())

    @case
    def migrate_nfs_rollback_reclaimed_by_provisioner(e):
        """migrated with --root, set to Delete (external-provisioner's finalizer), rolled back
        with nothing running: the FlexVolume PV exactly as saved, the record naming the claim
        again; its claim deleted, the provisioner reclaims it (the directory gone)"""
        p, c, pv, d = nfs_bound(e)
        e.kill(p, signal.SIGTERM)
        migrate(e, pv)
        set_policy(e, pv, "Delete")
        xp = ExtProv(e, "nfs.csi.flexvol")
        xp.sync()
        if FIN not in (pv_now(e, pv)["metadata"].get("finalizers") or []):
            o = pv_now(e, pv)  # (today's migrate: the provisioner's, as it would add it)
            o["metadata"]["finalizers"] = (o["metadata"].get("finalizers") or []) + [FIN]
            e.st.update("persistentvolumes", "", pv, o)
        migrate(e, pv, rollback=True)
        now = pv_now(e, pv)
        check(same_pv(saved(e, pv), now), "not the saved PV:\n%s\n%s" % (saved(e, pv), now))
        check(e.owner_of(d) == c["metadata"]["uid"], "owner record names %s" % e.owner_of(d))
        e.start()
        delete_claim(e, c)
        wait_for(lambda: pv_now(e, pv) is None, lambda: "the PV reclaimed by the provisioner "
                 "(PV %s; tree %s)" % (pv_now(e, pv), e.tree()), 20)
        check(e.tree() == [] and e.owner_records() == {}, "left on the share: %s" % e.tree())

    @case
    def migrate_loop_reclaimed_through_csi(e):
        """a loop PV of the provisioner migrated: provisioned-by loop.csi.flexvol and a node
        affinity term on the CSI driver's topology key (external-provisioner runs per node and
        deletes only what its node's topology reaches); set to Delete, its claim deleted: the
        image removed by flexvol-csi's DeleteVolume on that node, the PV gone; the controller
        and the node agent leave it alone"""
        ep = endpoint(e, "loop", loop_root(e))
        c, pv, img = loop_bound(e)
        migrate(e, pv)
        now = pv_now(e, pv)
        check(now["metadata"]["annotations"].get(BY) == "loop.csi.flexvol", "provisioned-by %s" %
              now["metadata"]["annotations"].get(BY))
        terms = now["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
        check({"matchExpressions": [{"key": "topology.loop.csi.flexvol/node", "operator": "In",
                                     "values": ["node-a"]}]} in terms, "node affinity %s" % terms)
        set_policy(e, pv, "Delete")
        other = ExtProv(e, "loop.csi.flexvol", ep, node="node-b")
        xp = ExtProv(e, "loop.csi.flexvol", ep, node="node-a")
        xp.sync()
        delete_claim(e, c)
        time.sleep(1.5)  # the agent's passes
        other.sync()
        check(os.path.exists(img) and pv_now(e, pv), "reclaimed by another node's provisioner")
        wait_for(lambda: (xp.sync(), pv_now(e, pv) is None)[1],
                 lambda: "the PV reclaimed through CSI (PV %s; DeleteVolume: %s)" % (
                     pv_now(e, pv), xp.errors), 20)
        check(not os.path.exists(img), "image %s left" % img)
        check(not e.events(reason="VolumeFailedDelete"), "events %s" % e.events())

    @case
    def migrate_loop_rollback_reclaimed_by_provisioner(e):
        """a loop PV migrated, set to Delete (external-provisioner's finalizer), rolled back:
        the FlexVolume PV exactly as saved; its claim deleted, the node agent removes the image
        and the PV"""
        c, pv, img = loop_bound(e)
        migrate(e, pv)
        set_policy(e, pv, "Delete")
        ExtProv(e, "loop.csi.flexvol").sync()
        if FIN not in (pv_now(e, pv)["metadata"].get("finalizers") or []):
            o = pv_now(e, pv)  # (today's migrate: the provisioner's, as it adds it)
            o["metadata"]["finalizers"] = (o["metadata"].get("finalizers") or []) + [FIN]
            e.st.update("persistentvolumes", "", pv, o)
        for p in e.procs:
            e.kill(p, signal.SIGTERM)
        migrate(e, pv, rollback=True)
        now = pv_now(e, pv)
        check(same_pv(saved(e, pv), now), "not the saved PV:\n%s\n%s" % (saved(e, pv), now))
        e.start("--node-agent", "--node", "node-a", "--loop-root", loop_root(e), "--interval", "1")
        e.start("--provisioners", LOOP)
        delete_claim(e, c)
        wait_for(lambda: pv_now(e, pv) is None and not os.path.exists(img),
                 lambda: "the image and the PV reclaimed by the agent (PV %s, image %s)" % (
                     pv_now(e, pv), os.path.exists(img)), 20)

    @case
    def migrate_csi_pv_annotated_ours(e):
        """a CSI PV annotated as the provisioner's (what migrate made before the handover, or
        without --root): the loop agent and the nfs backend reclaim it in that form too (the
        PV's csi.volumeAttributes are the driver options), nothing hangs"""
        p, c, pv, d = nfs_bound(e)
        o = pv_now(e, pv)
        fx = o["spec"].pop("flexVolume")
        o["spec"]["csi"] = {"driver": "nfs.csi.flexvol", "volumeHandle": pv,
                            "volumeAttributes": fx["options"]}
        e.st.update("persistentvolumes", "", pv, o)
        delete_claim(e, c)
        wait_for(lambda: pv_now(e, pv) is None, lambda: "the PV reclaimed (PV %s; tree %s)" % (
            pv_now(e, pv), e.tree()), 20)
        check(e.tree() == [], "left on the share: %s" % e.tree())

    @case
    def migrate_nfs_handover_refusals(e):
        """refused with nothing changed (no copy saved, PV and record as they were): --root for a
        directory below another (pathPattern with '/': flexvol-csi takes directories directly
        on the share only), and a rollback of a handed-over directory without --root"""
        e.sc(name="nested", params={"server": SERVER, "share": SHARE,
                                    "pathPattern": "${namespace}/${pvc}"})
        e.start()
        c = e.pvc("deep", sc="nested")
        wait_for(lambda: e.bound(c), "claim bound")
        pv = e.pv_of(c)["metadata"]["name"]
        before = pv_now(e, pv)
        r = migrate(e, pv, expect=1)
        check("cannot be a volume of the CSI driver" in r.stderr, "message: %s" % r.stderr)
        check(pv_now(e, pv) == before and not os.path.exists(os.path.join(e.tmp, pv + ".json")),
              "changed by a refused run")
        check(e.owner_of("default/deep") == c["metadata"]["uid"], "record %s" % e.owner_of("default/deep"))
        if not has_root_option(e):
            return
        e.sc(params={"server": SERVER, "share": SHARE})
        c = e.pvc("flat")
        wait_for(lambda: e.bound(c), "claim bound")
        pv = e.pv_of(c)["metadata"]["name"]
        migrate(e, pv)
        before = pv_now(e, pv)
        r = migrate(e, pv, rollback=True, root=False, expect=1)
        check("give --root" in r.stderr, "message: %s" % r.stderr)
        check(pv_now(e, pv) == before and e.owner_of(dirname_of(c)) == dirname_of(c),
              "changed by a refused rollback")

    @case
    def migrate_static(e):
        """flexvol-migrate as the image ships it (check-static-migrate: the static binary alone in
        an empty chroot, under qemu-user for a cross build): over HTTPS with the CA and a bearer
        token, a loop PV moved to CSI and back, the claim bound to it again each time"""
        tf = R.https_with_token(e, "tok-" + uuid.uuid4().hex)
        c = e.pvc("st", sc="", size="64Mi", modes=("ReadWriteOnce",), spec={"volumeName": "st-pv"})
        fv = {"driver": LOOP, "fsType": "ext4", "options": {"file": "st-pv.img", "size": "64Mi"}}
        e.st.put("persistentvolumes", {
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "st-pv"},
            "spec": {"capacity": {"storage": "64Mi"}, "accessModes": ["ReadWriteOnce"],
                     "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "", "flexVolume": fv,
                     "claimRef": {"namespace": "default", "name": "st", "uid": c["metadata"]["uid"]}}})
        wait_for(lambda: e.bound(c) or (pv_now(e, "st-pv") or {}).get("status", {}).get("phase") == "Bound",
                 "the PV bound")
        binary = migrate_argv(e)[0]
        if R.CHROOT:
            shutil.copy(binary, os.path.join(e.tmp, "flexvol-migrate"))
            pre = ["chroot", e.tmp]
            if R.EMULATOR:
                shutil.copy(R.EMULATOR, os.path.join(e.tmp, os.path.basename(R.EMULATOR)))
                pre.append("/" + os.path.basename(R.EMULATOR))
            argv = pre + ["/flexvol-migrate", "--token-file", "/token", "--certificate-authority",
                          "/" + os.path.relpath(e.ca, e.tmp), "--save", "/st-pv.json"]
        else:
            argv = [binary, "--token-file", tf, "--certificate-authority", e.ca, "--save",
                    os.path.join(e.tmp, "st-pv.json")]
        e.st.lose_claims = True
        for back in (False, True):
            r = subprocess.run(argv + ["--server", e.api.url, "--timeout", "30"] +
                               (["--rollback"] if back else []) + ["st-pv"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, timeout=120)
            check(r.returncode == 0, "migrate%s: exit %d: %s %s" % (
                " --rollback" if back else "", r.returncode, r.stdout, r.stderr))
            now = pv_now(e, "st-pv")
            check(("flexVolume" if back else "csi") in now["spec"] and now["status"]["phase"] == "Bound" and
                  now["spec"]["claimRef"]["uid"] == c["metadata"]["uid"], "the PV after the run: %s" % now)
        check(now["spec"]["flexVolume"] == fv and now["spec"]["persistentVolumeReclaimPolicy"] == "Delete",
              "rolled back exactly: %s" % now["spec"])
