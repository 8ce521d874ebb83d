# provisioner/provisioner.mk - flexvol-provisioner: dynamic provisioning for the flexvol/nfs
# backend (a directory per PV on an NFS share) and the flexvol/loop backend (an image per PV
# on the node the scheduler picked), and, with --node-agent, the loop node agent that makes,
# preallocates and reclaims those images on its node.  Included by the top Makefile.
#
#   make                        also builds $(O)/flexvol-provisioner
#   make check                  its unit tests (tests/unit/test-provisioner.c) and the
#                               integration test against a fake API server
#                               (tests/provisioner/run.py) run with the rest
#   make check-provisioner      the integration test alone
#   make O=build-tsan SANITIZE=thread check-provisioner
#                               the same on a ThreadSanitizer build (.ci/run: with
#                               TSAN_OPTIONS=log_path=..., a report fails the run)
#   make bench-provisioner-scale
#                               (part of make bench, not of CI: minutes) 1,000 claims beside
#                               10,000 of another provisioner's class against the real API
#                               server and controller-manager (the cluster lane's binaries),
#                               under the Deployment's memory limit; fails when a target is
#                               missed (tests/bench/provisioner-scale.py, docs/benchmarks.md).
#                               SCALE_ARGS="--foreign 2000 --claims 200" for a smaller run;
#                               the static build's binary (the image's) is measured
#
# It links the op layer's objects and the nfs driver for one reason: the PV's
# nfs options go through the nfs driver's own checks (fv_nfs_check_options, fv/nfs.h).

PROV_SRCS  := $(sort $(wildcard provisioner/*.c))
PROV_OBJS  := $(patsubst %.c,$(O)/obj/%.o,$(PROV_SRCS))
# the nfs driver's sources, wherever the tree keeps them (drivers/nfs.c or drivers/nfs/*.c)
PROV_NFS_SRCS := $(or $(wildcard drivers/nfs/*.c),$(wildcard drivers/nfs.c))
PROV_NFS_OBJS := $(patsubst %.c,$(O)/obj/%.o,$(PROV_NFS_SRCS))
# params.o and what it needs: shared with the unit test
PROV_LIB_OBJS := $(O)/obj/provisioner/api.o $(O)/obj/provisioner/params.o $(LIB_OBJS) \
	$(O)/obj/lib/kubejson.o $(O)/obj/lib/kubedecode.o \
	$(O)/obj/provisioner/queue.o $(O)/obj/provisioner/metrics.o $(PROV_NFS_OBJS) \
	$(CORE_OBJS)

.PHONY: check-provisioner bench-provisioner-scale

all: $(O)/flexvol-provisioner

$(O)/flexvol-provisioner: $(PROV_OBJS) $(LIB_OBJS) $(LIB_KUBE_OBJS) $(PROV_NFS_OBJS) $(CORE_OBJS)
	@[ -n "$(Q)" ] && echo "  LD      $@" || true
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(PROV_OBJS) $(LIB_OBJS) $(LIB_KUBE_OBJS) $(PROV_NFS_OBJS) \
		$(CORE_OBJS) $(KUBE_LIBS) $(FV_LIBS)

$(O)/tests/test-provisioner: tests/unit/test-provisioner.c $(PROV_LIB_OBJS) tests/unit/unit.h
	@mkdir -p $(dir $@)
	@[ -n "$(Q)" ] && echo "  TEST-CC $<" || true
	$(Q)$(CC) $(FV_CFLAGS) $(CFLAGS) -Itests/unit -Iprovisioner $(LDFLAGS) -o $@ $< \
		$(PROV_LIB_OBJS) $(FV_LIBS)

check-provisioner: $(O)/flexvol-provisioner $(O)/flexvol-migrate
	$(Q)python3 tests/provisioner/run.py --build $(O)

bench: bench-provisioner-scale

# the image's binary (static-provisioner): an exec'd storage child of a dynamic build costs
# five times the CPU (its libraries' relocations; docs/benchmarks.md)
bench-provisioner-scale: static-provisioner kube-components
	$(Q)python3 tests/bench/provisioner-scale.py --provisioner $(STATIC_O)/flexvol-provisioner \
		--bin "$$(tests/kube/build | tail -1)" $(SCALE_ARGS)

# header dependencies of the provisioner's own objects (the top Makefile includes the drivers')
-include $(PROV_OBJS:.o=.d)
