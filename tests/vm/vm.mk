# tests/vm/vm.mk: the VM test lane (tests/vm/README.md), included by the top
# Makefile. Needs root and a prepared host: tests/vm/setup-host (once).
#
#   make check-vm                          every tests/vm/t-* case, one boot
#   make check-vm VM_CASES="t-loop-driver" some cases
#   make check-vm-selftest                 the lane must fail on broken fixtures
#
# The guest sees the workspace at the same path, so $(O) must lie inside it.

VM_TIMEOUT ?= 900
VM_CASES   ?=

.PHONY: check-vm check-vm-selftest

check-vm: all
	$(Q)tests/vm/run --timeout $(VM_TIMEOUT) -e FV_BUILD=$(O) $(CURDIR) -- tests/vm/suite $(VM_CASES)

check-vm-selftest:
	$(Q)tests/vm/selftest --timeout $(VM_TIMEOUT)
