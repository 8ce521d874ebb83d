#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""flexvol-migrate against the real API server and the controller-manager's PV binder
(no kubelet, no cluster lane: property.RealApiServer on ports and a directory of its own).

    python3 tests/kube/migrate-api.py --build build [--bin DIR]      (make check-migrate-api)

Cases (each prints ok/FAIL; the last line is "N passed, N failed"):
  - map: loop, nfs and iscsi FlexVolume PVs to <driver>.csi.flexvol (volumeHandle = PV name,
    volumeAttributes = options, fsType/readOnly kept, secretRef as the stage secret, Retain,
    the claim's uid), the claim Bound again and annotated flexvol/migrated-to; a second run
    has nothing to do; --rollback restores the saved PV exactly (spec, reclaim policy);
  - refuse_pod: a pod of the claim that has not ended: exit 3, nothing changed, nothing saved;
  - refuse_node: a node whose status lists the volume in use: exit 3, nothing changed;
  - resume: the PV deleted after the save (a run killed there), the claim Lost: the next run
    creates the CSI PV from the saved copy and the claim is Bound again;
  - foreign: a PV of another FlexVolume driver or not bound: refused, nothing changed;
  - handover: a loop PV as flexvol-provisioner makes it (its finalizer, policy Delete, pinned by
    hostname), nothing running that drops that finalizer: migrate finishes; the CSI PV is
    annotated as loop.csi.flexvol's and has a node selector term on its topology key naming
    the node; set to Delete with external-provisioner's finalizer, rolled back with nothing
    running: the saved PV again, annotations, finalizers and node affinity as they were;
  - kubectl_plugin: `kubectl flexvol migrate` (the real kubectl running the plugin) with the
    cluster from a kubeconfig (KUBECONFIG): the README's commands as printed over three PVs, the
    dry run changing nothing; one claim in use refuses the whole run (exit 3, nothing changed or
    saved); then all moved, the copies in the default ~/.local/state/flexvol-migrate (0700);
    rolled back by a label selector that also matches another driver's PV (left alone); an
    unknown context refused with kubectl's message, nothing left in TMPDIR.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import property as P  # noqa: E402

NS = "default"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--bin", default=None)
    a = ap.parse_args()
    mig = os.path.abspath(os.path.join(a.build, "flexvol-migrate"))
    bindir = a.bin or subprocess.run([os.path.join(HERE, "build")], capture_output=True, text=True,
                                     check=True).stdout.strip().splitlines()[-1]
    tmp = tempfile.mkdtemp(prefix="fvmigrate-")
    srv = P.RealApiServer(bindir, tmp, private_bin=True)
    passed = failed = 0
    try:
        srv.up()
        api = srv.api
        tok = os.path.join(tmp, "token")
        with open(tok, "w") as f:
            f.write(P.TOKEN)

        def run(pv, *extra):
            r = subprocess.run([mig, "--server", srv.url, "--token-file", tok,
                                "--certificate-authority", srv.cert, "--save",
                                os.path.join(tmp, pv + ".json"), "--timeout", "60", *extra, pv],
                               capture_output=True, text=True, timeout=120)
            return r

        def wait(what, fn, timeout=60):
            end = time.monotonic() + timeout
            while time.monotonic() < end:
                v = fn()
                if v:
                    return v
                time.sleep(0.3)
            raise AssertionError(f"timed out waiting for {what}")

        def make(name, fv, policy="Delete"):
            st = api.create("/api/v1/persistentvolumes", {
                "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
                "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                         "persistentVolumeReclaimPolicy": policy, "storageClassName": "",
                         "flexVolume": fv}})
            assert st == 201, st
            st = api.create(f"/api/v1/namespaces/{NS}/persistentvolumeclaims", {
                "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": name, "namespace": NS},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": name,
                         "resources": {"requests": {"storage": "1Gi"}}}})
            assert st == 201, st
            wait(f"claim {name} Bound", lambda: (api.get(f"/api/v1/namespaces/{NS}/persistentvolumeclaims/{name}")
                                                  or {}).get("status", {}).get("phase") == "Bound")
            return api.get(f"/api/v1/namespaces/{NS}/persistentvolumeclaims/{name}")["metadata"]["uid"]

        def pv(name):
            return api.get(f"/api/v1/persistentvolumes/{name}")

        def claim(name):
            return api.get(f"/api/v1/namespaces/{NS}/persistentvolumeclaims/{name}")

        def events(name):
            return [(e["type"], e["reason"]) for e in api.items(
                f"/api/v1/namespaces/{NS}/events?fieldSelector=involvedObject.name%3D{name}")]

        wait("the default namespace", lambda: api.get(f"/api/v1/namespaces/{NS}"))
        vols = {
            "m-loop": {"driver": "flexvol/loop", "fsType": "ext4", "options": {"file": "m-loop.img", "size": "1Gi"}},
            "m-nfs": {"driver": "flexvol/nfs", "options": {"server": "192.0.2.1", "share": "/exports/a",
                                                           "nfsVersion": "4.2"}},
            "m-iscsi": {"driver": "flexvol/iscsi", "fsType": "xfs", "readOnly": True,
                        "secretRef": {"name": "chap", "namespace": NS},
                        "options": {"targetPortal": "192.0.2.2:3260", "iqn": "iqn.2026-01.test:t1", "lun": "3"}},
        }

        def case(name, fn):
            nonlocal passed, failed
            s = time.monotonic()
            try:
                fn()
                print(f"ok   {name} ({time.monotonic() - s:.1f} s)", flush=True)
                passed += 1
            except Exception as e:  # noqa: BLE001
                print(f"FAIL {name}: {e}", flush=True)
                failed += 1

        def c_map():
            for name, fv in vols.items():
                uid = make(name, fv)
                r = run(name)
                assert r.returncode == 0, (r.returncode, r.stderr)
                sp = pv(name)["spec"]
                drv = fv["driver"].split("/")[1] + ".csi.flexvol"
                csi = sp["csi"]
                assert "flexVolume" not in sp and csi["driver"] == drv and csi["volumeHandle"] == name, sp
                assert csi["volumeAttributes"] == fv["options"], csi
                assert csi.get("fsType") == fv.get("fsType") and csi.get("readOnly", False) == fv.get("readOnly", False), csi
                if "secretRef" in fv:
                    assert csi["nodeStageSecretRef"] == fv["secretRef"], csi
                assert sp["persistentVolumeReclaimPolicy"] == "Retain" and sp["claimRef"]["uid"] == uid, sp
                c = claim(name)
                assert c["metadata"]["uid"] == uid and c["status"]["phase"] == "Bound", c["status"]
                # Lost (with a ClaimLost event) only if the binder synced the claim in the gap
                print(f"     {name}: {r.stdout.strip().splitlines()[-1]}; claim events {events(name)}")
                assert c["metadata"]["annotations"].get("flexvol/migrated-to") == "csi", c["metadata"]
                r = run(name)
                assert r.returncode == 0 and "nothing to do" in r.stdout, r.stdout
                r = run(name, "--rollback")
                assert r.returncode == 0, (r.returncode, r.stderr)
                sp = pv(name)["spec"]
                assert sp["flexVolume"] == fv and "csi" not in sp and sp["persistentVolumeReclaimPolicy"] == "Delete", sp
                assert sp["claimRef"]["uid"] == uid and claim(name)["status"]["phase"] == "Bound"

        def c_refuse_pod():
            name = "r-pod"
            make(name, vols["m-loop"], policy="Retain")
            # no service-account controller here: the admission plugin needs the account
            api.create(f"/api/v1/namespaces/{NS}/serviceaccounts", {
                "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}})
            st = api.create(f"/api/v1/namespaces/{NS}/pods", {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "user", "namespace": NS},
                "spec": {"containers": [{"name": "c", "image": "x"}], "automountServiceAccountToken": False,
                         "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": name}}]}})
            assert st == 201, st
            before = pv(name)
            r = run(name)
            assert r.returncode == 3 and "is used by pod user" in r.stderr, (r.returncode, r.stderr)
            assert pv(name)["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
            assert not os.path.exists(os.path.join(tmp, name + ".json"))
            api.call("DELETE", f"/api/v1/namespaces/{NS}/pods/user", {"gracePeriodSeconds": 0})
            wait("the pod gone", lambda: api.get(f"/api/v1/namespaces/{NS}/pods/user") is None)
            r = run(name)
            assert r.returncode == 0, (r.returncode, r.stderr)

        def c_refuse_node():
            name = "r-node"
            make(name, vols["m-loop"], policy="Retain")
            assert api.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                                "metadata": {"name": "n1"}}) == 201
            st = api.merge("/api/v1/nodes/n1/status", {"status": {
                "volumesInUse": [f"flexvolume-flexvol/loop/{name}"]}})
            assert st == 200, st
            before = pv(name)
            r = run(name)
            assert r.returncode == 3 and "still has volume" in r.stderr, (r.returncode, r.stderr)
            assert pv(name)["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
            api.merge("/api/v1/nodes/n1/status", {"status": {"volumesInUse": None}})
            r = run(name)
            assert r.returncode == 0, (r.returncode, r.stderr)

        def c_resume():
            name = "r-resume"
            uid = make(name, vols["m-nfs"], policy="Retain")
            # what a run killed after its save and its delete leaves: the copy, no PV
            with open(os.path.join(tmp, name + ".json"), "w") as f:
                json.dump(pv(name), f)
            api.delete(f"/api/v1/persistentvolumes/{name}")
            api.merge(f"/api/v1/persistentvolumes/{name}", {"metadata": {"finalizers": None}})
            wait("the PV gone", lambda: pv(name) is None)
            wait("the claim Lost", lambda: claim(name)["status"].get("phase") == "Lost")
            r = run(name)
            assert r.returncode == 0, (r.returncode, r.stderr)
            sp = pv(name)["spec"]
            assert sp["csi"]["driver"] == "nfs.csi.flexvol" and sp["claimRef"]["uid"] == uid, sp
            assert claim(name)["status"]["phase"] == "Bound"

        def c_foreign():
            name = "r-foreign"
            make(name, {"driver": "othervendor/fake", "options": {}}, policy="Retain")
            r = run(name)
            assert r.returncode == 1 and "not a volume of a flexvol driver" in r.stderr, r.stderr
            assert "flexVolume" in pv(name)["spec"]
            assert api.create("/api/v1/persistentvolumes", {
                "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "r-unbound"},
                "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                         "storageClassName": "none", "flexVolume": vols["m-nfs"]}}) == 201
            r = run("r-unbound")
            assert r.returncode == 1 and "not bound" in r.stderr, r.stderr

        def c_handover():
            name, fin = "pvc-0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9", "external-provisioner.volume.kubernetes.io/finalizer"
            assert api.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {
                "name": "mig-node", "labels": {"kubernetes.io/hostname": "mig-host"}}}) == 201
            host_term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                               "values": ["mig-host"]}]}
            st = api.create("/api/v1/persistentvolumes", {
                "apiVersion": "v1", "kind": "PersistentVolume",
                "metadata": {"name": name, "finalizers": [fin], "labels": {"flexvol/node": "mig-node"},
                             "annotations": {"pv.kubernetes.io/provisioned-by": "flexvol/loop"}},
                "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                         "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "",
                         "nodeAffinity": {"required": {"nodeSelectorTerms": [host_term]}},
                         "flexVolume": {"driver": "flexvol/loop", "fsType": "ext4",
                                        "options": {"file": name + ".img", "size": "1Gi"}}}})
            assert st == 201, st
            st = api.create(f"/api/v1/namespaces/{NS}/persistentvolumeclaims", {
                "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "h-claim", "namespace": NS},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": name,
                         "resources": {"requests": {"storage": "1Gi"}}}})
            assert st == 201, st
            wait("claim h-claim Bound", lambda: claim("h-claim")["status"].get("phase") == "Bound")
            before = pv(name)
            t0 = time.monotonic()
            r = run(name, "--timeout", "15")
            assert r.returncode == 0, (r.returncode, r.stderr)
            print(f"     {name}: migrated in {time.monotonic() - t0:.1f} s with nothing to drop {fin}")
            p = pv(name)
            assert p["metadata"]["annotations"].get("pv.kubernetes.io/provisioned-by") == "loop.csi.flexvol", p["metadata"]
            assert fin not in (p["metadata"].get("finalizers") or []), p["metadata"]
            terms = p["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
            assert terms == [host_term, {"matchExpressions": [
                {"key": "topology.loop.csi.flexvol/node", "operator": "In", "values": ["mig-node"]}]}], terms
            # set to Delete, as a user does once it works: external-provisioner's finalizer
            assert api.merge(f"/api/v1/persistentvolumes/{name}", {
                "metadata": {"finalizers": (p["metadata"].get("finalizers") or []) + [fin]},
                "spec": {"persistentVolumeReclaimPolicy": "Delete"}}) == 200
            r = run(name, "--rollback", "--timeout", "15")
            assert r.returncode == 0, (r.returncode, r.stderr)
            p = pv(name)
            for k in ("labels", "annotations"):
                want = dict(before["metadata"].get(k) or {})
                have = dict(p["metadata"].get(k) or {})
                want.pop("pv.kubernetes.io/bound-by-controller", None)
                have.pop("pv.kubernetes.io/bound-by-controller", None)
                assert have == want, (k, have, want)
            assert sorted(p["metadata"]["finalizers"]) == sorted(before["metadata"]["finalizers"]), p["metadata"]
            assert {k: v for k, v in p["spec"].items() if k != "claimRef"} == \
                {k: v for k, v in before["spec"].items() if k != "claimRef"}, (p["spec"], before["spec"])
            wait("claim h-claim Bound again", lambda: claim("h-claim")["status"].get("phase") == "Bound")
            api.merge(f"/api/v1/persistentvolumes/{name}", {"metadata": {"finalizers": None},
                                                              "spec": {"persistentVolumeReclaimPolicy": "Retain"}})

        def readme_commands(names):
            """The README's commands for moving volumes, as printed: each line of its fenced block
            that starts with 'kubectl flexvol migrate', <pv>... standing for the PV names."""
            text = open(os.path.join(HERE, "..", "..", "README.md")).read()
            cmds = [ln.strip() for block in text.split("```")[1::2] for ln in block.splitlines()
                    if ln.strip().startswith("kubectl flexvol migrate")]
            assert len(cmds) >= 2 and "--dry-run" in cmds[0], cmds
            out = []
            for c in cmds:
                argv = shlex.split(c)
                assert argv.count("<pv>...") == 1, c
                i = argv.index("<pv>...")
                out.append(argv[:i] + names + argv[i + 1:])
            return out

        def c_kubectl_plugin():
            # the plugin as the release ships it (kubectl-flexvol, flexvol-migrate under that
            # name) and the real kubectl from the lane's build, which finds and runs it; the
            # cluster from a kubeconfig, as kubectl reads it (KUBECONFIG)
            home, tdir, plug = (os.path.join(tmp, d) for d in ("home", "t", "plugins"))
            for d in (home, tdir, plug):
                os.makedirs(d)
            os.symlink(mig, os.path.join(plug, "kubectl-flexvol"))
            kcfg = os.path.join(tmp, "kubeconfig")
            with open(kcfg, "w") as f:
                f.write(f"""apiVersion: v1
kind: Config
clusters:
- name: lane
  cluster:
    server: {srv.url}
    certificate-authority: {srv.cert}
users:
- name: admin
  user:
    token: {P.TOKEN}
contexts:
- name: lane
  context: {{cluster: lane, user: admin}}
current-context: lane
""")
            env = {"PATH": f"{plug}:{bindir}:/usr/bin:/bin", "HOME": home, "TMPDIR": tdir,
                   "KUBECONFIG": kcfg}
            kubectl = os.path.join(bindir, "kubectl")

            def k(argv, timeout=200):
                assert argv[:3] == ["kubectl", "flexvol", "migrate"], argv
                return subprocess.run([kubectl] + argv[1:], capture_output=True, text=True,
                                      env=env, timeout=timeout)

            names = ["b-one", "b-two", "b-three"]
            uids = {n: make(n, dict(vols["m-loop"], options={"file": n + ".img", "size": "1Gi"}),
                            policy="Retain") for n in names}
            dry, real = readme_commands(names)[:2]
            rv = {n: pv(n)["metadata"]["resourceVersion"] for n in names}
            saves = os.path.join(home, ".local", "state", "flexvol-migrate")
            r = k(dry)
            assert r.returncode == 0 and r.stdout.count("save it to") == 3, (r.returncode, r.stdout, r.stderr)
            assert all(pv(n)["metadata"]["resourceVersion"] == rv[n] for n in names)
            assert not os.path.exists(saves), "a dry run made the save directory"
            # one claim in use: the whole run refused up front, nothing changed, nothing saved
            api.create(f"/api/v1/namespaces/{NS}/serviceaccounts", {
                "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}})
            assert api.create(f"/api/v1/namespaces/{NS}/pods", {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "b-user", "namespace": NS},
                "spec": {"containers": [{"name": "c", "image": "x"}], "automountServiceAccountToken": False,
                         "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "b-three"}}]}}) == 201
            r = k(real)
            assert r.returncode == 3 and "PV b-three: refused" in r.stderr and "1 of 3 PVs refused" in r.stderr, \
                (r.returncode, r.stdout, r.stderr)
            assert all(pv(n)["metadata"]["resourceVersion"] == rv[n] for n in names)
            assert not os.path.exists(saves)
            api.call("DELETE", f"/api/v1/namespaces/{NS}/pods/b-user", {"gracePeriodSeconds": 0})
            wait("the pod gone", lambda: api.get(f"/api/v1/namespaces/{NS}/pods/b-user") is None)
            t0 = time.monotonic()
            r = k(real)
            assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
            print(f"     3 PVs moved by the README's command in {time.monotonic() - t0:.1f} s")
            for n in names:
                sp = pv(n)["spec"]
                assert sp["csi"]["driver"] == "loop.csi.flexvol" and sp["claimRef"]["uid"] == uids[n], sp
                assert claim(n)["status"]["phase"] == "Bound"
                assert json.load(open(os.path.join(saves, n + ".json")))["metadata"]["uid"]
            assert oct(os.stat(saves).st_mode & 0o777) == "0o700"
            # back, by a selector: the labelled PVs of ours; another driver's is left alone
            for n in names + ["r-foreign"]:
                assert api.merge(f"/api/v1/persistentvolumes/{n}", {"metadata": {"labels": {"batch": "b"}}}) == 200
            r = k(["kubectl", "flexvol", "migrate", "--rollback", "-l", "batch=b"])
            assert r.returncode == 0 and "PV r-foreign: of no flexvol driver: left alone" in r.stdout, \
                (r.returncode, r.stdout, r.stderr)
            for n in names:
                sp = pv(n)["spec"]
                assert "flexVolume" in sp and sp["claimRef"]["uid"] == uids[n], sp
            # a context kubectl does not know: its message, nothing started or left behind
            r = k(["kubectl", "flexvol", "migrate", "--context", "nope", "b-one"])
            assert r.returncode == 1 and 'context "nope"' in r.stderr, (r.returncode, r.stderr)
            assert os.listdir(tdir) == [], os.listdir(tdir)

        for n, fn in (("map", c_map), ("refuse_pod", c_refuse_pod), ("refuse_node", c_refuse_node),
                      ("resume", c_resume), ("foreign", c_foreign), ("handover", c_handover),
                      ("kubectl_plugin", c_kubectl_plugin)):
            case(n, fn)
    except Exception as e:  # noqa: BLE001
        print(f"FAIL setup: {e}\n{srv.logs()}")
        failed += 1
    finally:
        srv.close()
        subprocess.run(["rm", "-rf", tmp])
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
