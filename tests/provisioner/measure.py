#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Provisioning throughput and memory of flexvol-provisioner against the fake API.

    python3 tests/provisioner/measure.py BUILD[,BUILD...] N
    (e.g. build,build/static 200)

Starts each BUILD/flexvol-provisioner on a fresh fake API server with one
class, creates N claims at once, and prints the wall time until N PVs exist
and the process's VmHWM/VmRSS.  Not a test (numbers only).
Extra provisioner arguments: FVP_ARGS (e.g. "--workers 1").
"""
import os
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fakeapi import FakeAPI  # noqa: E402

N = int(sys.argv[2])
for b in sys.argv[1].split(","):
    d = tempfile.mkdtemp(); os.mkdir(d + "/share")
    api = FakeAPI(); st = api.store
    st.put("storageclasses", {"metadata": {"name": "nfs"}, "provisioner": "flexvol/nfs", "parameters": {"server": "s", "share": "/x"}})
    extra = os.environ.get("FVP_ARGS", "").split()
    if os.path.exists(b + "/flexvol-provisioner") and b"http-endpoint" in open(b + "/flexvol-provisioner", "rb").read():
        extra = ["--http-endpoint", "127.0.0.1:0"] + extra  # never the default :8080 here
    p = subprocess.Popen([b + "/flexvol-provisioner", "--server", api.url, "--root", d + "/share"] + extra,
                         stderr=subprocess.DEVNULL)
    time.sleep(1)
    t0 = time.time()
    for i in range(N):
        st.put("persistentvolumeclaims", {"metadata": {"name": "m%d" % i, "namespace": "default", "uid": str(uuid.uuid4()), "annotations": {"volume.kubernetes.io/storage-provisioner": "flexvol/nfs"}}, "spec": {"storageClassName": "nfs", "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}, "status": {"phase": "Pending"}})
    while len(st.items("persistentvolumes")) < N:
        time.sleep(0.02)
    dt = time.time() - t0
    rss = [l for l in open("/proc/%d/status" % p.pid) if l.startswith(("VmRSS", "VmHWM"))]
    f = open("/proc/%d/stat" % p.pid).read().rsplit(")", 1)[1].split()
    cpu = sum(int(x) for x in f[11:15]) / os.sysconf("SC_CLK_TCK")  # children included
    load = open("/proc/loadavg").read().split()[0]
    print(b, "%d claims provisioned in %.2f s" % (N, dt), " ".join(x.split()[0] + x.split()[1] + "kB" for x in rss),
          "requests", len(st.requests), "cpu %.2f s (children's included)" % cpu, "load", load)
    p.terminate(); p.wait(); api.close()
    subprocess.run(["rm", "-rf", d])
