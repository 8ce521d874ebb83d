# tests/fuzz/fuzz.mk - libFuzzer targets at the provisioner's API boundary (issue 24).
# Included by the top Makefile.
#
#   make check-fuzz-provisioner [FUZZ_SECONDS=10]   build every target with clang, libFuzzer,
#                                                   ASan and UBSan (in build-fuzz/) and run each
#                                                   for FUZZ_SECONDS on its corpus; a crash, a
#                                                   leak or a sanitizer report fails
#   make fuzz-provisioner                           only build them
#
# Targets (tests/fuzz/README.md): watch (the watch-stream decoder), class, claim, pv,
# node, report (one API object through the controller's handlers, the API answered from
# memory).  Corpora: tests/fuzz/corpus/<target>/ (read only; what a run finds goes to
# $(FUZZ_O)/corpus/<target>/).  ci/deps installs clang and libFuzzer.

FUZZ_TARGETS := watch class claim pv node report
FUZZ_SECONDS ?= 10
FUZZ_O       ?= build-fuzz
FUZZ_CC      ?= clang
FUZZ_SAN     := fuzzer-no-link,address,undefined

.PHONY: fuzz-provisioner check-fuzz-provisioner

# warnings are gcc's to enforce (every other lane, -Werror); clang 14 names some differently
# (-Wno-format-truncation) and warns where gcc does not: warnings only, here
ifneq ($(findstring clang,$(CC)),)
FV_CFLAGS += -Wno-error -Wno-unknown-warning-option
endif

# the handlers' objects: the provisioner's but main (the process), runner (the watch loop),
# lease, httpd, agent (the node's files) and migrate (a command of its own, with its own API
# client), and lib's API helpers but the client (lib/kube.c: answered by the target itself)
FUZZ_PROV_OBJS := $(filter-out $(addprefix $(O)/obj/provisioner/,main.o runner.o lease.o \
	httpd.o agent.o migrate.o migrate-pv.o),$(PROV_OBJS)) \
	$(filter-out $(O)/obj/lib/kube.o,$(LIB_KUBE_OBJS))

$(O)/fuzz/fuzz-watch: tests/fuzz/fuzz-watch.c $(LIB_KUBE_OBJS) $(O)/obj/provisioner/params.o \
		$(PROV_NFS_OBJS) $(CORE_OBJS)
	@mkdir -p $(dir $@)
	@[ -n "$(Q)" ] && echo "  FUZZ-LD $@" || true
	$(Q)$(CC) $(FV_CFLAGS) $(CFLAGS) -Iprovisioner $(LDFLAGS) -fsanitize=fuzzer -o $@ $^ \
		$(KUBE_LIBS) $(FV_LIBS)

$(addprefix $(O)/fuzz/fuzz-,$(filter-out watch,$(FUZZ_TARGETS))): $(O)/fuzz/fuzz-%: \
		tests/fuzz/fuzz-handlers.c $(FUZZ_PROV_OBJS) $(LIB_OBJS) $(PROV_NFS_OBJS) $(CORE_OBJS)
	@mkdir -p $(dir $@)
	@[ -n "$(Q)" ] && echo "  FUZZ-LD $@" || true
	$(Q)$(CC) $(FV_CFLAGS) $(CFLAGS) -Iprovisioner -DFUZZ_KIND='"$*"' $(LDFLAGS) \
		-fsanitize=fuzzer -o $@ $< $(FUZZ_PROV_OBJS) $(LIB_OBJS) $(PROV_NFS_OBJS) $(CORE_OBJS) $(FV_LIBS) \
		-lpthread

fuzz-provisioner: $(addprefix $(O)/fuzz/fuzz-,$(FUZZ_TARGETS))

# a make of its own: every object built with clang and the sanitizers, in $(FUZZ_O)
check-fuzz-provisioner:
	$(Q)$(MAKE) --no-print-directory O=$(FUZZ_O) CC=$(FUZZ_CC) SANITIZE=$(FUZZ_SAN) \
		fuzz-provisioner
	$(Q)tests/fuzz/run --build $(FUZZ_O) --seconds $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# --- flexvol-csi's wire (issue 37 point 5; tests/fuzz/README.md) ---------------------------------
#
#   make check-fuzz-csi [FUZZ_SECONDS=10]   build the targets below like those above and run each
#                                           for FUZZ_SECONDS on its corpus
#   make fuzz-csi                           only build them
#
# grpc-wire (a client connection's bytes) and grpc-request (one request message, framed by the
# target) through csi/grpc.c and grpc-calls.c, which tests/fuzz/fuzz-grpc.c includes, with stub
# handlers for every method of the CSI services; csi-identity, csi-node and csi-controller (one
# request through a service's real handlers, the op layer stubbed: below).  Needs ci/deps-csi's
# libraries and generated messages.

FUZZ_GRPC_TARGETS := grpc-wire grpc-request
FUZZ_SVC_TARGETS  := csi-identity csi-node csi-controller
FUZZ_CSI_TARGETS  := $(FUZZ_GRPC_TARGETS) $(FUZZ_SVC_TARGETS)

.PHONY: fuzz-csi check-fuzz-csi

$(addprefix $(O)/fuzz/fuzz-,$(FUZZ_GRPC_TARGETS)): $(O)/fuzz/fuzz-grpc-%: tests/fuzz/fuzz-grpc.c \
		csi/grpc.c csi/grpc-calls.c csi/grpc.h csi/grpc-int.h $(CSI_GEN_OBJS) $(CORE_OBJS) \
		| $(CSI_GEN)/.stamp
	@mkdir -p $(dir $@)
	@[ -n "$(Q)" ] && echo "  FUZZ-LD $@" || true
	$(Q)$(CC) $(FV_CFLAGS) $(CFLAGS) -I$(CSI_GEN) -Icsi $(CSI_CFLAGS) -DFUZZ_GRPC='"$*"' \
		$(LDFLAGS) -fsanitize=fuzzer -o $@ $< $(CSI_GEN_OBJS) $(CORE_OBJS) $(CSI_LIBS) \
		$(FV_LIBS)

# --- flexvol-csi's services (issue 37 point 5; tests/fuzz/README.md) ------------------------------
#
# csi-identity, csi-node, csi-controller: one request of a method of the service, unpacked with
# its real descriptor, through its real handler: the csi objects as flexvol-csi links them (but
# main.o), the op layer's boundary stubbed by tests/fuzz/op-stub.c in place of src/ and lib/
# (of which only the options parser, the messages and the version string are linked: they touch
# nothing).  grpc_reply() and grpc_fail() are grpc-calls.c's, wrapped to count the answers.

FUZZ_SVC_CSI := $(addprefix $(O)/obj/csi/,identity.o node.o controller.o controller-loop.o \
	controller-nfs.o controller-iscsi.o snapshot.o kit.o profile.o grpc.o grpc-calls.o)
FUZZ_SVC_OBJS := $(FUZZ_SVC_CSI) $(O)/obj/tests/fuzz/op-stub.o \
	$(addprefix $(O)/obj/src/,opts.o ctx.o version.o) $(CSI_GEN_OBJS)

$(O)/obj/tests/fuzz/op-stub.o: FV_CFLAGS += -I$(CSI_GEN) -Icsi $(CSI_CFLAGS)
$(O)/obj/tests/fuzz/op-stub.o: | $(CSI_GEN)/.stamp
-include $(O)/obj/tests/fuzz/op-stub.d

# in a fuzzer build only: an uninitialised string is 0xAA bytes to its end, so reading one runs
# past its array (ASan); flexvol-csi itself is never built so
ifneq ($(findstring fuzzer,$(SANITIZE)),)
$(FUZZ_SVC_CSI): CFLAGS += -ftrivial-auto-var-init=pattern
endif

$(addprefix $(O)/fuzz/fuzz-,$(FUZZ_SVC_TARGETS)): $(O)/fuzz/fuzz-csi-%: tests/fuzz/fuzz-csi.c \
		tests/fuzz/op-stub.h $(FUZZ_SVC_OBJS) | $(CSI_GEN)/.stamp
	@mkdir -p $(dir $@)
	@[ -n "$(Q)" ] && echo "  FUZZ-LD $@" || true
	$(Q)$(CC) $(FV_CFLAGS) $(CFLAGS) -I$(CSI_GEN) -Icsi -Itests/fuzz $(CSI_CFLAGS) \
		-DFUZZ_SVC='"$*"' $(LDFLAGS) -fsanitize=fuzzer -Wl,--wrap=grpc_reply \
		-Wl,--wrap=grpc_fail -o $@ $< $(FUZZ_SVC_OBJS) $(CSI_LIBS) $(FV_LIBS)

fuzz-csi: $(addprefix $(O)/fuzz/fuzz-,$(FUZZ_CSI_TARGETS))

check-fuzz-csi:
	$(Q)$(MAKE) --no-print-directory O=$(FUZZ_O) CC=$(FUZZ_CC) SANITIZE=$(FUZZ_SAN) fuzz-csi
	$(Q)tests/fuzz/run --build $(FUZZ_O) --seconds $(FUZZ_SECONDS) $(FUZZ_CSI_TARGETS)
