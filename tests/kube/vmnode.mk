# tests/kube/vmnode.mk - the cluster lane with the VM lane's guest as a second node: NFS and iSCSI
# under the real kubelet and controller-manager (tests/kube/cases_vmnode.py, tests/kube/README.md).
# Included by the top Makefile with tests/kube/*.mk. Needs tests/vm/setup-host as well.
#
#   make check-kube-vm      the cluster (as make check-kube), the install, then the guest booted
#                           with QEMU's user-mode network and joined as node flexvol-vm-1: the
#                           NFS and iSCSI cases on it, its teardown; last line `N passed, N failed`
#   make check-kube-vm-faults
#                           the same against a deliberately broken build (FV_FAULT, the top
#                           Makefile; built into $(O)/fault): nfs mount answers Success without
#                           mounting, iscsi waitforattach answers with another LUN's disk. Passes
#                           only when the guest joined and every vmnode_nfs_* case and
#                           vmnode_iscsi_controller FAILED (the run's output: $(O)/fault/check-kube-vm.out)
#   make check-kube-vm-e2e  Kubernetes' external storage e2e suites against a flexvol/nfs class on
#                           the guest node (tests/kube/e2e/test-driver-nfs.yaml; e2e.test as for
#                           make check-kube-e2e): the join, case vmnode_nfs_e2e, the teardown
#                           (FLEXVOL_E2E_FOCUS / FLEXVOL_E2E_SKIP change the subset)
#   KUBE_ARGS=...           more arguments for tests/kube/run.py (e.g. --keep)
.PHONY: check-kube-vm check-kube-vm-faults check-kube-vm-e2e
KUBE_VM_FAULTS := NFS_MOUNT_NOOP ISCSI_WFA_OTHER_LUN

# the guest reads the images from the workspace (its /tmp is its own)
check-kube-vm: kube-components kube-images
	$(Q)FLEXVOL_KUBE_VMNODE=1 FLEXVOL_KUBE_IMAGES=$(abspath $(KUBE_IMAGES)) \
		FLEXVOL_KUBE_BIN="$$(tests/kube/build | tail -1)" \
		python3 tests/kube/run.py --images $(KUBE_IMAGES) -k vmnode $(KUBE_ARGS)

check-kube-vm-faults:
	$(Q)mkdir -p $(O)/fault; out=$(O)/fault/check-kube-vm.out; \
	$(MAKE) --no-print-directory check-kube-vm O=$(O)/fault FV_FAULT="$(KUBE_VM_FAULTS)" 2>&1 | tee $$out; \
	bad=0; \
	grep -q '^ok   vmnode_join ' $$out || { echo "check-kube-vm-faults: the guest did not join: nothing shown"; bad=1; }; \
	grep -q '^FAIL vmnode_nfs_' $$out || { echo "check-kube-vm-faults: no NFS case ran and failed"; bad=1; }; \
	if grep '^ok   vmnode_nfs_' $$out; then echo "check-kube-vm-faults: NFS cases passed on a mount that mounts nothing"; bad=1; fi; \
	grep -q '^FAIL vmnode_iscsi_controller ' $$out || { echo "check-kube-vm-faults: vmnode_iscsi_controller did not fail on waitforattach's wrong disk"; bad=1; }; \
	echo "check-kube-vm-faults: $$(grep -c '^FAIL vmnode_' $$out) cases failed on the faults: $$(grep '^FAIL vmnode_' $$out | cut -d' ' -f2 | tr '\n' ' ')"; \
	[ $$bad = 0 ] && echo "check-kube-vm-faults: the faults fail the cases, as they must"

check-kube-vm-e2e: kube-components kube-images
	$(Q)d="$$(tests/kube/e2e/build-e2e | tail -1)" && \
	FLEXVOL_KUBE_VMNODE=1 FLEXVOL_E2E_DIR="$$d" FLEXVOL_KUBE_IMAGES=$(abspath $(KUBE_IMAGES)) \
		FLEXVOL_KUBE_BIN="$$(tests/kube/build | tail -1)" \
		python3 tests/kube/run.py --images $(KUBE_IMAGES) -k vmnode_join -k vmnode_nfs_e2e -k vmnode_down $(KUBE_ARGS)

# make check-kube-vm-csi: the join, then flexvol's nfs and iscsi drivers over CSI on the guest
# (deploy/csi/nfs and deploy/csi/iscsi through tests/kube/overlays/csi-vm: cases vmnode_csi_*,
# the migration of both drivers' FlexVolume PVs to CSI and back, Kubernetes' external storage e2e
# suites through CSI against nfs.csi.flexvol), the teardown. Builds the sidecars as make
# check-kube-csi does (KUBE_CSI_SIDECARS: the provisioner and attacher are needed here) and e2e.test
# as make check-kube-e2e does (KUBE_VM_CSI_E2E= leaves the suites out). KUBE_VM_CSI_SELECT names
# the cases to run (default: all of them), e.g. "vmnode_join vmnode_csi_install vmnode_csi_e2e
# vmnode_csi_remove vmnode_down".
.PHONY: check-kube-vm-csi
KUBE_VM_CSI_E2E ?= 1
KUBE_VM_CSI_SELECT ?= vmnode
check-kube-vm-csi: kube-components image-context $(O)/flexvol-migrate
	$(Q)FLEXVOL_CSI_SIDECARS="$$(tests/kube/csi/build $(KUBE_CSI_SIDECARS) | tail -1)" \
		FLEXVOL_IMAGE_CONTEXT=$(CURDIR)/$(IMAGE_O) tests/kube/build-images $(KUBE_IMAGES)
	$(Q)$(if $(KUBE_VM_CSI_E2E),FLEXVOL_E2E_DIR="$$(tests/kube/e2e/build-e2e | tail -1)") \
		FLEXVOL_KUBE_VMNODE=1 FLEXVOL_KUBE_VMNODE_CSI=1 FLEXVOL_KUBE_IMAGES=$(abspath $(KUBE_IMAGES)) \
		FLEXVOL_MIGRATE_BIN=$(CURDIR)/$(O)/flexvol-migrate \
		FLEXVOL_KUBE_BIN="$$(tests/kube/build | tail -1)" \
		python3 tests/kube/run.py --images $(KUBE_IMAGES) $(addprefix -k ,$(KUBE_VM_CSI_SELECT)) $(KUBE_ARGS)
