# tests/kube/multinode.mk - the cluster lane with two VM guests as nodes: what only two nodes show
# for an iSCSI volume (tests/kube/cases_multinode.py, tests/kube/README.md). Outside CI (two TCG
# guests next to the control plane on this 2-core host). Needs tests/vm/setup-host as well.
#
#   make check-kube-multinode  the cluster (as make check-kube), the install, a tgtd on the host
#                              (127.0.0.1:13260), two guests joined as flexvol-mn-a and -b: the
#                              two-node cases, their teardown; last line `N passed, N failed`
#   KUBE_ARGS=...              more arguments for tests/kube/run.py (e.g. --keep)
.PHONY: check-kube-multinode

check-kube-multinode: kube-components kube-images
	$(Q)FLEXVOL_KUBE_MULTINODE=1 FLEXVOL_KUBE_IMAGES=$(abspath $(KUBE_IMAGES)) \
		FLEXVOL_KUBE_BIN="$$(tests/kube/build | tail -1)" \
		python3 tests/kube/run.py --images $(KUBE_IMAGES) -k multinode $(KUBE_ARGS)
