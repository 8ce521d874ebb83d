# tests/kube/loop-e2e.mk - Kubernetes' external storage e2e suites against flexvol/loop
# (docs/loop-provisioning.md).  Included by the top Makefile with tests/kube/*.mk.
#
#   make check-kube-e2e      build (or reuse) e2e.test, agnhost and the suites' images
#                            (tests/kube/e2e/build-e2e, cached in ~/.cache/flexvol-kube/e2e-*),
#                            then the cluster lane with the install and the suites only
#                            (FLEXVOL_E2E_FOCUS / FLEXVOL_E2E_SKIP to change the subset; the
#                            loop provisioning cases run in make check-kube)
.PHONY: check-kube-e2e

check-kube-e2e: kube-components kube-images
	$(Q)d="$$(tests/kube/e2e/build-e2e | tail -1)" && \
	FLEXVOL_E2E_DIR="$$d" FLEXVOL_KUBE_BIN="$$(tests/kube/build | tail -1)" \
		python3 tests/kube/run.py --images $(KUBE_IMAGES) -k loopprov_e2e $(KUBE_ARGS)
