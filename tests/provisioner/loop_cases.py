# SPDX-License-Identifier: Apache-2.0
"""flexvol/loop cases of the provisioner's integration test (run.py registers them).

The controller (--provisioners flexvol/loop) and the node agent (--node-agent)
run as real processes against the fake API server; the agent's loop root is a
temporary directory, so its images, owner records (trusted.* extended
attributes: root only) and reports are real files.  The node's half of an
expansion (kubelet calling the driver's expandfs) is the real-cluster lane's.
"""

import os
import subprocess
import time
import uuid

LOOP = "flexvol/loop"
OWNER = "trusted.flexvol.owner"
MiB = 1024 * 1024


def register(R):
    case, check, wait_for, Fail = R.case, R.check, R.wait_for, R.Fail

    def node(e, name="node-a", labels=None):
        lab = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
        lab.update(labels or {})
        return e.st.put("nodes", {"apiVersion": "v1", "kind": "Node",
                                  "metadata": {"name": name, "labels": lab}})

    def loop_sc(e, name="loop", params=None, reclaim=None, expand=False, mode="WaitForFirstConsumer",
                topologies=None):
        o = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
             "provisioner": LOOP, "parameters": dict(params or {}), "volumeBindingMode": mode}
        if reclaim:
            o["reclaimPolicy"] = reclaim
        if expand:
            o["allowVolumeExpansion"] = True
        if topologies:
            o["allowedTopologies"] = topologies
        return e.st.put("storageclasses", o)

    def loop_root(e, name="node-a"):
        d = os.path.join(e.tmp, "loop-" + name)
        os.makedirs(d, exist_ok=True)
        return d

    def start_controller(e):
        return e.start("--provisioners", LOOP)

    def start_agent(e, name="node-a"):
        return e.start("--node-agent", "--node", name, "--loop-root", loop_root(e, name),
                       "--interval", "1")

    def claim(e, name, size="64Mi", sc="loop", node_name="node-a"):
        ann = {"volume.kubernetes.io/selected-node": node_name} if node_name else {}
        return e.pvc(name, sc=sc, size=size, modes=("ReadWriteOnce",), provisioner=LOOP,
                     annotations=ann)

    def report(e, name="node-a"):
        return e.st.get("configmaps", name, "flexvol-loop")

    def fake_report(e, name="node-a", free=1 << 30, images=None):
        data = {"free": str(free), "time": str(int(time.time())), "root": "/x"}
        data.update(images or {})
        e.st.put("configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": name, "namespace": "flexvol-loop"},
                                "data": data})

    def image_of(e, c, name="node-a"):
        return os.path.join(loop_root(e, name), "pvc-%s.img" % c["metadata"]["uid"])

    def owner(path):
        try:
            return os.getxattr(path, OWNER).decode()
        except OSError:
            return None

    def claim_now(e, c):
        return e.st.get("persistentvolumeclaims", c["metadata"]["name"], c["metadata"]["namespace"])

    root_only = os.geteuid() == 0

    @case
    def loop_provision_on_selected_node(e):
        """WaitForFirstConsumer: nothing before the selected node; then one PV pinned to that
        node's hostname, the loop driver, pvc-<uid>.img and its size, the class's fsType;
        the agent makes the image (sparse, owner = the PV) and reports it"""
        node(e, "node-a", {"kubernetes.io/hostname": "host-a"})
        loop_sc(e, params={"fsType": "xfs"})
        start_agent(e)
        wait_for(lambda: report(e), "the agent's first report")
        start_controller(e)
        c = claim(e, "data", size="100M", node_name=None)
        time.sleep(1.5)
        check(e.pv_of(c) is None, "a PV before the scheduler selected a node")
        c = claim_now(e, c)
        c["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] = "node-a"
        e.st.put("persistentvolumeclaims", c)
        wait_for(lambda: e.bound(c), "claim bound")
        pv = e.pv_of(c)
        fx = pv["spec"]["flexVolume"]
        uid = c["metadata"]["uid"]
        check(fx["driver"] == LOOP and fx["fsType"] == "xfs", "driver/fsType: %r" % fx)
        # 100M = 95.37 MiB, rounded up to whole MiB for the driver
        check(fx["options"] == {"file": "pvc-%s.img" % uid, "size": str(96 * MiB)},
              "options: %r" % fx["options"])
        check(pv["spec"]["capacity"]["storage"] == "96Mi", "capacity %r" % pv["spec"]["capacity"])
        terms = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
        check(terms == [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                               "values": ["host-a"]}]}], "nodeAffinity %r" % terms)
        check(pv["metadata"]["labels"] == {"flexvol/node": "node-a"}, "labels %r" % pv["metadata"])
        check(pv["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"] == LOOP, "provisioned-by")
        # the event follows the PV's POST, which the fake binder may bind first
        wait_for(lambda: e.events(c, "ProvisioningSucceeded"), "a ProvisioningSucceeded event")
        img = image_of(e, c)
        wait_for(lambda: os.path.exists(img), "the agent made the image")
        st = os.stat(img)
        check(st.st_size == 96 * MiB and st.st_blocks * 512 < MiB, "sparse image of 96Mi: %r" % (st,))
        if root_only:
            check(owner(img) == pv["metadata"]["name"], "owner record %r" % owner(img))
        wait_for(lambda: "pvc-%s.img" % uid in (report(e) or {}).get("data", {}), "image reported")

    @case
    def loop_report_written_on_change(e):
        """the agent's report: written when an image appears, not at every pass (a steady load
        on etcd for nothing), with the loop root's free space and each image's bytes"""
        node(e)
        start_agent(e)
        wait_for(lambda: report(e), "the agent's first report")
        time.sleep(3.5)  # three more passes
        check(e.st.count("PUT", "/api/v1/namespaces/flexvol-loop/configmaps") == 0,
              "the unchanged report was written again")
        d = report(e)["data"]
        check(int(d["free"]) > 0 and abs(int(d["time"]) - time.time()) < 30 and
              d["root"] == loop_root(e), "report %r" % d)
        with open(os.path.join(loop_root(e), "pvc-x.img"), "wb") as f:
            f.truncate(4 * MiB)
        wait_for(lambda: report(e)["data"].get("pvc-x.img") == "%d 0" % (4 * MiB), "image reported")

    @case
    def loop_preallocate(e):
        """preallocate: true: the agent allocates every block of the image"""
        node(e)
        loop_sc(e, params={"preallocate": "true"})
        start_agent(e)
        wait_for(lambda: report(e), "the agent's first report")
        start_controller(e)
        c = claim(e, "pre", size="8Mi")
        wait_for(lambda: e.bound(c), "claim bound")
        check(e.pv_of(c)["spec"]["flexVolume"]["options"].get("preallocate") == "true", "option")
        img = image_of(e, c)
        wait_for(lambda: os.path.exists(img) and os.stat(img).st_blocks * 512 >= 8 * MiB,
                 "a preallocated image")

    @case
    def loop_class_refusals(e):
        """Immediate binding, mountOptions and unknown parameters: ProvisioningFailed, no PV"""
        node(e)
        fake_report(e)
        loop_sc(e, "imm", mode="Immediate")
        loop_sc(e, "bad", params={"sparse": "yes"})
        o = loop_sc(e, "mo")
        o["mountOptions"] = ["noatime"]
        e.st.put("storageclasses", o)
        start_controller(e)
        for sc, words in (("imm", "WaitForFirstConsumer"), ("bad", "unknown parameter 'sparse'"),
                          ("mo", "mountOptions are not supported")):
            c = claim(e, "c-" + sc, sc=sc)
            wait_for(lambda: any(words in ev["message"] for ev in e.events(c, "ProvisioningFailed")),
                     "event for %s saying %r" % (sc, words))
            check(e.pv_of(c) is None, "a PV for class %s" % sc)

    @case
    def loop_class_without_parameters(e):
        """a class with every default: the API server stores no parameters map at all (it drops
        an empty one), and no mountOptions; its claims are provisioned (ext4, sparse), and an
        nfs class without parameters is refused with an event, not a crash (the process once
        died on it with SIGSEGV, re-listed after its restart and died again: no class served)"""
        node(e)
        fake_report(e)
        o = loop_sc(e, "bare")
        del o["parameters"]
        e.st.put("storageclasses", o)
        e.st.put("storageclasses", {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                                    "metadata": {"name": "nfs-bare"}, "provisioner": "flexvol/nfs"})
        p = e.start("--provisioners", LOOP + ",flexvol/nfs")
        c = claim(e, "c-bare", sc="bare")
        wait_for(lambda: e.bound(c), "claim of the all-defaults class bound")
        fx = e.pv_of(c)["spec"]["flexVolume"]
        check(fx["fsType"] == "ext4" and "preallocate" not in fx["options"], "defaults: %r" % fx)
        n = e.pvc("c-nfs-bare", sc="nfs-bare", provisioner="flexvol/nfs")
        wait_for(lambda: any("'server' is required" in ev["message"]
                             for ev in e.events(n, "ProvisioningFailed")), "an event for nfs-bare")
        check(p.poll() is None, "the provisioner died: %r" % p.returncode)

    @case
    def loop_csi_fstype_key(e):
        """csi.storage.k8s.io/fstype (the key Kubernetes' own e2e suites and CSI classes use) is
        read as fsType; both keys in one class are refused (as the CSI external-provisioner)"""
        node(e)
        fake_report(e)
        loop_sc(e, "csi", params={"csi.storage.k8s.io/fstype": "xfs"})
        loop_sc(e, "both", params={"fsType": "xfs", "csi.storage.k8s.io/fstype": "xfs"})
        start_controller(e)
        c = claim(e, "c-csi", sc="csi")
        wait_for(lambda: e.bound(c), "claim bound")
        check(e.pv_of(c)["spec"]["flexVolume"]["fsType"] == "xfs", "fsType %r" % e.pv_of(c)["spec"])
        c = claim(e, "c-both", sc="both")
        wait_for(lambda: any("both given" in ev["message"] for ev in e.events(c, "ProvisioningFailed")),
                 "a refusal saying both keys are given")
        check(e.pv_of(c) is None, "a PV for a class with both fsType keys")

    @case
    def loop_capacity_refused_rescheduled(e):
        """a claim larger than the node's room: ProvisioningFailed, the selected-node annotation
        removed (back to the scheduler), no PV; what other PVs were promised counts"""
        node(e)
        loop_sc(e)
        fake_report(e, free=100 * MiB)
        start_controller(e)
        c = claim(e, "big", size="200Mi")
        wait_for(lambda: e.events(c, "ProvisioningFailed"), "ProvisioningFailed")
        ev = e.events(c, "ProvisioningFailed")[0]["message"]
        check("no room for 200 MiB" in ev and "100 MiB free" in ev and "scheduler" in ev, ev)
        wait_for(lambda: "volume.kubernetes.io/selected-node" not in
                 claim_now(e, c)["metadata"]["annotations"], "selected-node removed")
        check(e.pv_of(c) is None, "a PV for a claim that does not fit")
        # 60Mi fits; then another 60Mi does not: the first PV's image is not there yet
        c1 = claim(e, "first", size="60Mi")
        wait_for(lambda: e.bound(c1), "first bound")
        c2 = claim(e, "second", size="60Mi")
        wait_for(lambda: e.events(c2, "ProvisioningFailed"), "second refused")
        check("60 MiB of it promised" in e.events(c2, "ProvisioningFailed")[0]["message"],
              e.events(c2, "ProvisioningFailed")[0]["message"])
        # overcommit: true counts today's free space only
        loop_sc(e, "oc", params={"overcommit": "true"})
        c3 = claim(e, "third", size="60Mi", sc="oc")
        wait_for(lambda: e.bound(c3), "overcommitted claim bound")

    @case
    def loop_no_report_stale_or_missing_node(e):
        """no agent report, a stale one, a selected node that does not exist: refused and
        handed back to the scheduler"""
        node(e, "node-a")
        node(e, "node-b")
        loop_sc(e)
        fake_report(e, "node-b")
        cm = e.st.get("configmaps", "node-b", "flexvol-loop")
        cm["data"]["time"] = str(int(time.time()) - 3600)
        e.st.put("configmaps", cm)
        start_controller(e)
        for n, words in (("node-a", "has not reported"), ("node-b", "stale"),
                         ("node-z", "does not exist")):
            c = claim(e, "c-" + n, node_name=n)
            wait_for(lambda: any(words in ev["message"] for ev in e.events(c, "ProvisioningFailed")),
                     "%s: %r" % (n, words))
            wait_for(lambda: "volume.kubernetes.io/selected-node" not in
                     claim_now(e, c)["metadata"]["annotations"], "selected-node removed")

    @case
    def loop_allowed_topologies(e):
        """a selected node outside the class's allowedTopologies is refused; one inside is not"""
        node(e, "node-a", {"topology.example.com/zone": "z1"})
        node(e, "node-b", {"topology.example.com/zone": "z2"})
        fake_report(e, "node-a")
        fake_report(e, "node-b")
        loop_sc(e, topologies=[{"matchLabelExpressions": [
            {"key": "topology.example.com/zone", "values": ["z2"]}]}])
        start_controller(e)
        ca = claim(e, "in-a", node_name="node-a")
        cb = claim(e, "in-b", node_name="node-b")
        wait_for(lambda: e.bound(cb), "the claim on node-b bound")
        wait_for(lambda: any("allowedTopologies" in ev["message"]
                             for ev in e.events(ca, "ProvisioningFailed")), "node-a refused")
        check(e.pv_of(ca) is None, "a PV on node-a")

    def reclaim_setup(e, reclaim=None):
        node(e)
        loop_sc(e, reclaim=reclaim)
        start_agent(e)
        wait_for(lambda: report(e), "the agent's first report")
        start_controller(e)
        c = claim(e, "gone")
        wait_for(lambda: e.bound(c), "claim bound")
        img = image_of(e, c)
        wait_for(lambda: os.path.exists(img), "image made")
        return c, img

    @case
    def loop_delete_removes_image(e):
        """Delete: the agent removes the image whose owner record names the PV, then the PV"""
        if not root_only:
            raise Fail("needs root (trusted.* owner records)")
        c, img = reclaim_setup(e)
        pv = e.pv_of(c)
        e.st.remove("persistentvolumeclaims", "default", "gone")
        wait_for(lambda: not os.path.exists(img), "image removed", 20)
        wait_for(lambda: e.st.get("persistentvolumes", pv["metadata"]["name"]) is None, "PV deleted")

    @case
    def loop_delete_refused_other_owner_or_bound(e):
        """the image stays while a loop device holds it, and when its owner record names
        another volume (an event on the PV says so)"""
        if not root_only:
            raise Fail("needs root (trusted.* owner records, loop devices)")
        c, img = reclaim_setup(e)
        pvname = e.pv_of(c)["metadata"]["name"]
        dev = subprocess.run(["losetup", "--show", "-f", img], capture_output=True, text=True,
                             check=True).stdout.strip()
        try:
            e.st.remove("persistentvolumeclaims", "default", "gone")
            wait_for(lambda: "still bound to " + dev in e.all_logs(), "bound image left alone")
            check(os.path.exists(img), "a bound image was removed")
        finally:
            subprocess.run(["losetup", "-d", dev], check=True)
        os.setxattr(img, OWNER, b"someone-else")
        wait_for(lambda: any("names someone-else" in ev["message"] for ev in e.st.items("events")
                             if ev["reason"] == "VolumeFailedDelete"), "VolumeFailedDelete event")
        time.sleep(1.5)
        check(os.path.exists(img), "an image of another owner was removed")
        check(e.st.get("persistentvolumes", pvname) is not None, "the PV was deleted")

    @case
    def loop_retain_keeps_image(e):
        """Retain: the released PV and its image stay"""
        c, img = reclaim_setup(e, reclaim="Retain")
        pv = e.pv_of(c)
        e.st.remove("persistentvolumeclaims", "default", "gone")
        time.sleep(3)
        check(os.path.exists(img), "a retained image was removed")
        check(e.st.get("persistentvolumes", pv["metadata"]["name"])["status"]["phase"] == "Released",
              "the retained PV is not Released")

    @case
    def loop_node_gone_event(e):
        """a released PV whose node is gone: a warning on the PV, which stays"""
        node(e)
        loop_sc(e)
        fake_report(e)
        start_controller(e)
        c = claim(e, "orphan")
        wait_for(lambda: e.bound(c), "claim bound")
        pv = e.pv_of(c)
        e.st.remove("nodes", "", "node-a")
        e.st.remove("persistentvolumeclaims", "default", "orphan")
        wait_for(lambda: any("node-a is gone" in ev["message"] for ev in e.st.items("events")
                             if ev["reason"] == "VolumeFailedDelete"), "node-gone event")
        check(e.st.get("persistentvolumes", pv["metadata"]["name"]) is not None, "the PV went")

    def grow(e, c, size):
        c = claim_now(e, c)
        c["spec"]["resources"]["requests"]["storage"] = size
        e.st.put("persistentvolumeclaims", c)

    @case
    def loop_expand(e):
        """a larger request on a class with allowVolumeExpansion: the PV's capacity is raised,
        the claim's status says NodeResizePending with the new allocatedResources"""
        node(e)
        loop_sc(e, expand=True)
        fake_report(e)
        start_controller(e)
        c = claim(e, "grow", size="64Mi")
        wait_for(lambda: e.bound(c), "claim bound")
        grow(e, c, "100Mi")
        pvname = "pvc-" + c["metadata"]["uid"]
        wait_for(lambda: e.st.get("persistentvolumes", pvname)["spec"]["capacity"]["storage"] ==
                 "100Mi", "PV capacity raised")
        wait_for(lambda: claim_now(e, c)["status"].get("allocatedResourceStatuses") ==
                 {"storage": "NodeResizePending"}, "NodeResizePending")
        st = claim_now(e, c)["status"]
        check(st["allocatedResources"] == {"storage": "100Mi"}, "allocatedResources %r" % st)
        check(st["capacity"] == {"storage": "64Mi"}, "the claim's capacity is kubelet's to set")
        # the condition the resizer sets with it (Kubernetes' MarkForFSResize): the e2e suites'
        # offline expansion waits for it, and kubelet removes it when it has grown the filesystem
        conds = [x for x in st.get("conditions", []) if x["type"] == "FileSystemResizePending"]
        check(len(conds) == 1 and conds[0]["status"] == "True" and
              conds[0].get("lastTransitionTime"), "FileSystemResizePending condition: %r" % st)
        # posted a moment after the claim's status (slower on a sanitizer build)
        wait_for(lambda: e.events(c, "FileSystemResizeRequired"), "a FileSystemResizeRequired event")
        # lowered while the node expansion is pending (the API allows it above status.capacity):
        # refused with an event, the PV keeps its size
        grow(e, c, "80Mi")
        wait_for(lambda: any("shrinking is not supported" in ev["message"]
                             for ev in e.events(c, "VolumeResizeFailed")), "shrink refused")
        check(e.st.get("persistentvolumes", pvname)["spec"]["capacity"]["storage"] == "100Mi",
              "PV shrunk")
        # kubelet finishes: capacity set, the status cleared; nothing more happens, and a
        # bound claim that asks for nothing more costs no request
        cl = claim_now(e, c)
        cl["status"] = {"phase": "Bound", "capacity": {"storage": "100Mi"},
                        "allocatedResources": {"storage": "100Mi"}}
        with e.st.lock:
            e.st.objs["persistentvolumeclaims"][("default", "grow")]["status"] = cl["status"]
        n = len(e.st.patches)
        gets = e.st.count("GET", "/api/v1/persistentvolumes/" + pvname)
        grow(e, c, "100Mi")
        time.sleep(1.5)
        check(len(e.st.patches) == n, "patched again after kubelet finished: %r" % e.st.patches[n:])
        check(e.st.count("GET", "/api/v1/persistentvolumes/" + pvname) == gets,
              "the PV read for a claim asking for nothing more")

    @case
    def loop_expand_not_allowed(e):
        """a class without allowVolumeExpansion: an event, the PV unchanged"""
        node(e)
        loop_sc(e)
        fake_report(e)
        start_controller(e)
        c = claim(e, "nogrow", size="64Mi")
        wait_for(lambda: e.bound(c), "claim bound")
        grow(e, c, "128Mi")
        wait_for(lambda: any("does not allow volume expansion" in ev["message"]
                             for ev in e.events(c, "VolumeResizeFailed")), "event")
        check(e.pv_of(c)["spec"]["capacity"]["storage"] == "64Mi", "PV grown")

    @case
    def loop_only_instance_needs_no_root(e):
        """--provisioners flexvol/loop: --root is not opened (a missing one is fine); nfs
        classes are left alone"""
        node(e)
        loop_sc(e)
        fake_report(e)
        e.sc()
        e.root = os.path.join(e.tmp, "missing")
        start_controller(e)
        c = claim(e, "l")
        n = e.pvc("n")
        wait_for(lambda: e.bound(c), "loop claim bound")
        time.sleep(1)
        check(e.pv_of(n) is None, "an nfs claim provisioned by a loop-only instance")

    @case
    def loop_agent_health(e):
        """the node agent serves /healthz, /readyz and /metrics (its passes, build_info, process
        metrics; not the controller's series): ready once its report is published; while the
        API refuses it, live but not ready, saying why; ready again after"""
        node(e)
        start_agent(e)
        url = R.http_url(e, 0)
        wait_for(lambda: report(e), "the agent's first report")
        wait_for(lambda: R.http_get(url + "/readyz")[0] == 200, "ready")
        check(R.http_get(url + "/healthz")[:2] == (200, "ok\n"), "live")
        body = R.http_get(url + "/metrics")[1]
        check(R.metric(body, 'flexvol_provisioner_agent_passes_total{result="success"}') >= 1, body)
        check(R.metric(body, "flexvol_provisioner_agent_last_success_timestamp_seconds") > 0, body)
        check("flexvol_provisioner_build_info{" in body and "process_cpu_seconds_total" in body,
              "build_info and process metrics")
        check("flexvol_provisioner_provision_total" not in body and
              "flexvol_provisioner_leader" not in body, "no controller series")
        # the API refuses the agent's list of its PVs: not ready, and why; still live
        e.st.throttle("GET", "/api/v1/persistentvolumes", n=10000, retry_after=0)
        st, why, _ = wait_for(lambda: (lambda r: r if r[0] == 503 else None)(
            R.http_get(url + "/readyz")), "not ready while the API refuses")
        check("API" in why, "says why: %r" % why)
        check(R.http_get(url + "/healthz")[0] == 200, "live all the same")
        check(R.metric(R.http_get(url + "/metrics")[1],
                       'flexvol_provisioner_agent_passes_total{result="failure"}') >= 1, "failures counted")
        with e.st.lock:
            e.st.throttles.clear()
        wait_for(lambda: R.http_get(url + "/readyz")[0] == 200, "ready again")
