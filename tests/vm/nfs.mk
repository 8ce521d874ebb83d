# tests/vm/nfs.mk: the nfs driver's part of `make bench` (included by the top
# Makefile).  The host measures init and Not supported; the VM lane adds the
# real NFS mount/unmount path; both next to the bash + jq seed driver
# (tests/bench/nfs-seed).  NFS_BENCH_VM=0 skips the VM boot.
NFS_BENCH_RUNS ?= 200
NFS_BENCH_VM   ?= 1

.PHONY: bench-nfs
bench-nfs: all $(O)/floor
	$(Q)tests/bench/nfs-bench $(O) $(NFS_BENCH_RUNS)
ifneq ($(NFS_BENCH_VM),0)
	$(Q)tests/vm/run --timeout $(VM_TIMEOUT) -e FV_BUILD=$(O) $(CURDIR) -- tests/bench/nfs-bench $(O) 40
endif

bench: bench-nfs
