# tests/kube/csi.mk - the cluster lane's CSI cases (tests/kube/cases_csi.py). Included by the top
# Makefile. Outside CI like the rest of issue 28's CSI work: it needs `make csi`'s libraries.
#
#   make check-kube-csi     build flexvol-csi, flexvol-provisioner (the migrate command), the
#                           CSI sidecars and the lane's registrar (tests/kube/csi/build, cached),
#                           the images (tests/kube/build-images with the CSI images), then run
#                           the cases whose name contains "csi" (root)
#   KUBE_ARGS="-k csi_static"   narrow further
#   make check-migrate-api  flexvol-provisioner migrate against a real API server and the PV
#                           binder of its own (tests/kube/migrate-api.py; no kubelet, no lane
#                           lock; about 10 s once the components are built)
.PHONY: check-kube-csi kube-csi-sidecars check-migrate-api

check-migrate-api: kube-components $(O)/flexvol-provisioner
	$(Q)python3 tests/kube/migrate-api.py --build $(O) --bin "$$(tests/kube/build | tail -1)"

kube-csi-sidecars:
	$(Q)tests/kube/csi/build

check-kube-csi: kube-components csi image-context $(O)/flexvol-provisioner
	$(Q)FLEXVOL_CSI_BIN=$(CURDIR)/$(O)/flexvol-csi FLEXVOL_CSI_SIDECARS="$$(tests/kube/csi/build | tail -1)" \
		FLEXVOL_IMAGE_CONTEXT=$(CURDIR)/$(IMAGE_O) tests/kube/build-images $(KUBE_IMAGES)
	$(Q)FLEXVOL_KUBE_CSI=1 FLEXVOL_PROVISIONER_BIN=$(CURDIR)/$(O)/flexvol-provisioner \
		FLEXVOL_KUBE_BIN="$$(tests/kube/build | tail -1)" \
		python3 tests/kube/run.py --images $(KUBE_IMAGES) -k csi $(KUBE_ARGS)
