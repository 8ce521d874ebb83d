# tests/vm/vm.mk: the VM test lane (tests/vm/README.md), included by the top
# Makefile. Needs root and a prepared host: tests/vm/setup-host (once).
#
#   make check-vm                          every tests/vm/t-* case, one boot
#   make check-vm VM_CASES="t-loop-driver" some cases
#   make check-vm-selftest                 the lane must fail on broken fixtures
#
# The guest sees the workspace at the same path, so $(O) must lie inside it.

# one boot runs every case: loop, iscsi and nfs take 15-25 min under TCG on a loaded host
VM_TIMEOUT ?= 2400
VM_CASES   ?=

.PHONY: check-vm check-vm-selftest

# t-csi-nfs runs flexvol-csi and csi-sanity (built here: the guest has no network)
check-vm: all csi
	$(Q)tests/csi/build >/dev/null
	$(Q)tests/vm/run --timeout $(VM_TIMEOUT) -e FV_BUILD=$(O) $(CURDIR) -- tests/vm/suite $(VM_CASES)

check-vm-selftest:
	$(Q)tests/vm/selftest --timeout $(VM_TIMEOUT)
