# tests/kube/vmnode.mk - the cluster lane with the VM lane's guest as a second node: NFS and iSCSI
# under the real kubelet and controller-manager (tests/kube/cases_vmnode.py, tests/kube/README.md).
# Included by the top Makefile with tests/kube/*.mk. Needs tests/vm/setup-host as well.
#
#   make check-kube-vm      the cluster (as make check-kube), the install, then the guest booted
#                           with QEMU's user-mode network and joined as node flexvol-vm-1: the
#                           NFS and iSCSI cases on it, its teardown; last line `N passed, N failed`
#   KUBE_ARGS=...           more arguments for tests/kube/run.py (e.g. --keep)
.PHONY: check-kube-vm

# the guest reads the images from the workspace (its /tmp is its own)
check-kube-vm: kube-components kube-images
	$(Q)FLEXVOL_KUBE_VMNODE=1 FLEXVOL_KUBE_IMAGES=$(abspath $(KUBE_IMAGES)) \
		FLEXVOL_KUBE_BIN="$$(tests/kube/build | tail -1)" \
		python3 tests/kube/run.py --images $(KUBE_IMAGES) -k vmnode $(KUBE_ARGS)
