# tests/kube/multinode.mk - the cluster lane with two VM guests as nodes: what only two nodes show
# for an iSCSI volume (tests/kube/cases_multinode.py, tests/kube/README.md). Outside CI (two TCG
# guests next to the control plane on this 2-core host). Needs tests/vm/setup-host as well.
#
#   make check-kube-multinode  the cluster (as make check-kube), the install, a tgtd on the host
#                              (127.0.0.1:13260), two guests joined as flexvol-mn-a and -b: the
#                              two-node cases through FlexVolume, then the same through
#                              iscsi.csi.flexvol (deploy/csi/iscsi, its controller on the host
#                              node), their teardown; last line `N passed, N failed`. Builds the
#                              CSI sidecars as make check-kube-csi does (KUBE_CSI_SIDECARS;
#                              cached) and the installer image with flexvol-csi in it
#   KUBE_MULTINODE_CSI=        the FlexVolume cases only (no sidecar built)
#   KUBE_ARGS=...              more arguments for tests/kube/run.py (e.g. --keep; the CSI cases
#                              alone: KUBE_ARGS="-k multinode_join -k multinode_csi -k multinode_down")
.PHONY: check-kube-multinode
KUBE_MULTINODE_CSI ?= 1

check-kube-multinode: kube-components image-context
	$(Q)$(if $(KUBE_MULTINODE_CSI),FLEXVOL_CSI_SIDECARS="$$(tests/kube/csi/build $(KUBE_CSI_SIDECARS) | tail -1)") \
		FLEXVOL_IMAGE_CONTEXT=$(CURDIR)/$(IMAGE_O) tests/kube/build-images $(KUBE_IMAGES)
	$(Q)FLEXVOL_KUBE_MULTINODE=1 FLEXVOL_KUBE_MULTINODE_CSI=$(if $(KUBE_MULTINODE_CSI),1,0) \
		FLEXVOL_KUBE_IMAGES=$(abspath $(KUBE_IMAGES)) \
		FLEXVOL_KUBE_BIN="$$(tests/kube/build | tail -1)" \
		python3 tests/kube/run.py --images $(KUBE_IMAGES) -k multinode $(KUBE_ARGS)
