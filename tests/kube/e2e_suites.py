# SPDX-License-Identifier: Apache-2.0
"""Kubernetes' external storage e2e suites (e2e.test of the pinned k8s.io/kubernetes, built by
tests/kube/e2e/build-e2e) run against one of our test driver files (tests/kube/e2e/test-driver-*.yaml),
for the cases that do it: loopprov_e2e (flexvol/loop), vmnode_nfs_e2e (flexvol/nfs on the VM
guest), csi_e2e_loop (loop.csi.flexvol).

FLEXVOL_E2E_FOCUS / FLEXVOL_E2E_SKIP / FLEXVOL_E2E_TIMEOUT override a case's focus, skip and the
suites' time limit (2h). The suites' images are imported by the caller (the node's containerd
differs per case); this module only runs e2e.test and reports.
"""
import os
import subprocess
import time

import cluster as C

DRIVERS = os.path.join(C.ROOT, "tests", "kube", "e2e")
# What no case can run here: the optional features, disruption, serial and slow specs, and
# volumeMode's "should not mount / map unused volumes", which looks at the node through a
# host-exec pod that nsenters PID 1's mount namespace, which these machines refuse even to root
# ("nsenter: cannot open /proc/1/ns/mnt: Permission denied"; it also reads /var/lib/kubelet,
# whatever -kubelet-root-dir says).
SKIP_ALWAYS = r"\[Feature:|\[Disruptive\]|\[Serial\]|\[Slow\]|should not mount / map unused volumes"
# SKIP_ALWAYS for the drivers over CSI, whose optional features (snapshots, clones, raw block,
# capacity) the driver files declare: of the [Feature:...] tags only those none of them serves are
# skipped, by name (e2e.test's Go regexp has no look-ahead)
SKIP_CSI = SKIP_ALWAYS.replace(r"\[Feature:", r"\[Feature:(SELinux|VolumeAttributesClass|VolumeSourceXFS)\]", 1)


def import_images(ctr, cache):
    """The suites' images (busybox, nginx, agnhost) into a node's containerd: @ctr(*args) runs
    `ctr -n k8s.io <args>` there."""
    for tar in ("busybox.tar", "nginx.tar", "agnhost.tar"):
        ctr("images", "import", "--local", os.path.join(cache, "images", tar))


def run(driver_file, focus, skip, report, extra=()):
    """Run the suites of @driver_file (a file name in tests/kube/e2e/) focused on @focus, skipping
    @skip, the JUnit report and the log in build/@report/. Prints the summary and every failed
    spec; returns (exit status, seconds, log path)."""
    cache = os.environ["FLEXVOL_E2E_DIR"]
    out = os.path.join(C.ROOT, "build", report)
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ, KUBE_TEST_REPO_LIST=os.path.join(cache, "repo-list.yaml"),
               KUBECONFIG=C.p("admin.kubeconfig"))
    argv = [os.path.join(cache, "e2e.test"),
            "-ginkgo.focus=" + os.environ.get("FLEXVOL_E2E_FOCUS", focus),
            "-ginkgo.skip=" + os.environ.get("FLEXVOL_E2E_SKIP", skip),
            "-ginkgo.no-color", "-ginkgo.timeout=" + os.environ.get("FLEXVOL_E2E_TIMEOUT", "2h"),
            "-storage.testdriver=" + os.path.join(DRIVERS, driver_file), "-provider=local",
            "-kubeconfig=" + C.p("admin.kubeconfig"), "-report-dir=" + out,
            "-kubelet-root-dir=" + C.p("kubelet"), "-allowed-not-ready-nodes=0",
            "-node-os-distro=debian", *extra]
    log = os.path.join(out, "e2e.log")
    t0 = time.monotonic()
    with open(log, "w") as f:
        r = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=7500)
    secs = time.monotonic() - t0
    text = open(log, errors="replace").read()
    summary = [ln for ln in text.splitlines() if ln.startswith(("Ran ", "FAIL!", "SUCCESS!"))
               or "[FAIL]" in ln]
    print("\n".join("  e2e: " + ln for ln in summary[-60:]), flush=True)
    return r.returncode, secs, log
