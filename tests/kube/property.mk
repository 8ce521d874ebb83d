# tests/kube/property.mk - the provisioner's property test against a real API server.
# Included by the top Makefile (-include tests/kube/*.mk).
#
#   make check-kube-property    etcd, kube-apiserver and kube-controller-manager's PV controllers
#                               (the cluster lane's binaries: tests/kube/build, cached) on ports
#                               and a directory of their own, no kubelet; flexvol-provisioner and
#                               a loop node agent under random classes, claims, nodes, reports,
#                               kill -9 and restarts (tests/kube/property.py); short: 120 steps
#                               or 60 s, then up to 60 s to settle (CI)
#   PROPERTY_ARGS="--long"      the long mode (1500 steps or 15 min; outside CI)
#   PROPERTY_ARGS="--seed N"    replay the steps of a run (its first line prints the seed)
.PHONY: check-kube-property

check-kube-property: $(O)/flexvol-provisioner kube-components
	$(Q)python3 tests/kube/property.py --build $(O) --bin "$$(tests/kube/build | tail -1)" \
		$(PROPERTY_ARGS)
