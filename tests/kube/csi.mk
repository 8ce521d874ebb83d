# tests/kube/csi.mk - the cluster lane's CSI cases (tests/kube/cases_csi.py). Included by the top
# Makefile.
#
#   make check-kube-csi     build flexvol-migrate, the installer image
#                           (flexvol-csi in it, static, as shipped), the CSI sidecars and the
#                           lane's registrar (tests/kube/csi/build, cached) and their images,
#                           then run the cases whose name contains "csi" (root)
#   KUBE_ARGS="-k csi_static"   narrow further
#   KUBE_CSI_SIDECARS=registrar  CI's run: build and run the registrar only, without the cases
#                           of deploy/csi/controller (the provisioner, attacher and resizer take
#                           12 min to build on two cores) and of deploy/csi/snapshot
#   make check-kube-csi-snapshot  the snapshot, restore, clone and capacity cases of loop
#                           (tests/kube/cases_csi_snapshot.py: deploy/csi/snapshot, its controller
#                           and CRDs, deploy/csi/capacity) with the sidecars they need
#   make check-kube-csi-e2e the same, and Kubernetes' external storage e2e suites through CSI
#                           (case csi_e2e_loop: e2e.test from tests/kube/e2e/build-e2e, cached)
#   make check-kube-csi-shapes  the cases of the three shapes of an install and the path from
#                           FlexVolume to CSI only (tests/kube/cases_csi_shapes.py) with every
#                           sidecar: the CSI-only dynamic and Helm cases too, which CI's
#                           registrar-only run leaves out (outside CI; docs/migration.md, "Three shapes")
#   make bench-kube-pods    16 pods with fresh loop claims started at once, through CSI and
#                           through FlexVolume, seconds until all Running (cases_bench.py)
#   make check-migrate-api  flexvol-migrate against a real API server and the PV
#                           binder of its own (tests/kube/migrate-api.py; no kubelet, no lane
#                           lock; about 10 s once the components are built)
.PHONY: bench-kube-pods check-kube-csi check-kube-csi-e2e check-kube-csi-shapes check-kube-csi-snapshot kube-csi-sidecars check-migrate-api

check-migrate-api: kube-components $(O)/flexvol-migrate
	$(Q)python3 tests/kube/migrate-api.py --build $(O) --bin "$$(tests/kube/build | tail -1)"

kube-csi-sidecars:
	$(Q)tests/kube/csi/build

# the sidecars built and run: all five, or (CI) the registrar only, which leaves out the cases of
# deploy/csi/controller (csi_dynamic_loop, csi_e2e_loop) and, without the snapshotter
# (csi-snapshotter and snapshot-controller), those of deploy/csi/snapshot and deploy/csi/capacity
KUBE_CSI_SIDECARS ?= provisioner attacher resizer registrar snapshotter
# the cases run: those whose name contains this
KUBE_CSI_SELECT ?= csi

check-kube-csi: kube-components image-context $(O)/flexvol-migrate
	$(Q)FLEXVOL_CSI_SIDECARS="$$(tests/kube/csi/build $(KUBE_CSI_SIDECARS) | tail -1)" \
		FLEXVOL_IMAGE_CONTEXT=$(CURDIR)/$(IMAGE_O) tests/kube/build-images $(KUBE_IMAGES)
	$(Q)FLEXVOL_KUBE_CSI=1 FLEXVOL_MIGRATE_BIN=$(CURDIR)/$(O)/flexvol-migrate \
		FLEXVOL_KUBE_CSI_CONTROLLER=$(if $(filter provisioner,$(KUBE_CSI_SIDECARS)),1,0) \
		FLEXVOL_KUBE_CSI_SNAPSHOT=$(if $(filter provisioner,$(KUBE_CSI_SIDECARS)),$(if $(filter snapshotter,$(KUBE_CSI_SIDECARS)),1,0),0) \
		FLEXVOL_KUBE_BIN="$$(tests/kube/build | tail -1)" $(KUBE_CSI_ENV) \
		python3 tests/kube/run.py --images $(KUBE_IMAGES) -k $(KUBE_CSI_SELECT) $(KUBE_ARGS)

check-kube-csi-e2e: KUBE_CSI_ENV = FLEXVOL_E2E_DIR="$$(tests/kube/e2e/build-e2e | tail -1)"
check-kube-csi-e2e: check-kube-csi

# issue 41.4: pods through CSI against FlexVolume, started together (tests/kube/cases_bench.py)
bench-kube-pods: KUBE_CSI_ENV = FLEXVOL_KUBE_BENCH=1
bench-kube-pods: KUBE_CSI_SELECT = bench_pods
bench-kube-pods: check-kube-csi

check-kube-csi-shapes: KUBE_CSI_SELECT = csi_shape
check-kube-csi-shapes: check-kube-csi

check-kube-csi-snapshot: KUBE_CSI_SIDECARS = provisioner resizer registrar snapshotter
check-kube-csi-snapshot: KUBE_CSI_SELECT = csi_snapshot -k csi_capacity
check-kube-csi-snapshot: check-kube-csi
