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
# handlers for every method of the CSI services.  Needs ci/deps-csi's libraries and generated
# messages.

FUZZ_CSI_TARGETS := grpc-wire grpc-request

.PHONY: fuzz-csi check-fuzz-csi

$(addprefix $(O)/fuzz/fuzz-,$(FUZZ_CSI_TARGETS)): $(O)/fuzz/fuzz-grpc-%: tests/fuzz/fuzz-grpc.c \
		csi/grpc.c csi/grpc-calls.c csi/grpc.h csi/grpc-int.h $(CSI_GEN_OBJS) $(CORE_OBJS) \
		| $(CSI_GEN)/.stamp
	@mkdir -p $(dir $@)
	@[ -n "$(Q)" ] && echo "  FUZZ-LD $@" || true
	$(Q)$(CC) $(FV_CFLAGS) $(CFLAGS) -I$(CSI_GEN) -Icsi $(CSI_CFLAGS) -DFUZZ_GRPC='"$*"' \
		$(LDFLAGS) -fsanitize=fuzzer -o $@ $< $(CSI_GEN_OBJS) $(CORE_OBJS) $(CSI_LIBS) \
		$(FV_LIBS)

fuzz-csi: $(addprefix $(O)/fuzz/fuzz-,$(FUZZ_CSI_TARGETS))

check-fuzz-csi:
	$(Q)$(MAKE) --no-print-directory O=$(FUZZ_O) CC=$(FUZZ_CC) SANITIZE=$(FUZZ_SAN) fuzz-csi
	$(Q)tests/fuzz/run --build $(FUZZ_O) --seconds $(FUZZ_SECONDS) $(FUZZ_CSI_TARGETS)
