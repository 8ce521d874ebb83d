# flexvol - Kubernetes FlexVolume drivers (loop, nfs, iscsi) on one op layer.
#
#   make                     build/<driver> for every drivers/<name>/ directory
#   make check               unit tests + kubelet simulator (root, real loop devices)
#   make check-layout        sizes, private headers, include direction, name prefixes
#   make bench               per-call cost against the exec floor, attach cost vs node size
#   make bench-cycle         the attach cycle per op, its floors, against the previous release
#   make SANITIZE=address,undefined check
#   make V=1                 show commands
#
# One multi-call binary (build/flexvol) is copied to build/<driver>; the driver
# is picked by basename(argv[0]).  A driver is a directory drivers/<name>/
# holding as many .c files as its concerns need (exactly one of them defines
# fv_driver_<name>); the registry is generated from the directory list below.

CC        ?= cc
PKG_CONFIG ?= pkg-config
PKGS      := json-c mount blkid libudev
O         := build

DRIVERS   := $(sort $(patsubst drivers/%/,%,$(dir $(wildcard drivers/*/*.c))))
CORE_SRCS := $(sort $(wildcard src/*.c))
DRV_SRCS  := $(sort $(foreach d,$(DRIVERS),$(wildcard drivers/$(d)/*.c)))
FV_SRCS   := $(CORE_SRCS) $(DRV_SRCS) drivers/registry.c
# lib/: what the programs share above the op layer and the drivers (docs/design.md, "Layout"):
# flexvol-provisioner and flexvol-csi link it, the FlexVolume program does not need it; its
# kube* group (the API client, on libcurl) is linked by the programs that talk to the API
# server only (flexvol-provisioner, flexvol-migrate)
LIB_KUBE_SRCS := $(sort $(wildcard lib/kube*.c))
LIB_SRCS  := $(filter-out $(LIB_KUBE_SRCS),$(sort $(wildcard lib/*.c)))
LIB_OBJS  := $(patsubst %.c,$(O)/obj/%.o,$(LIB_SRCS))
LIB_KUBE_OBJS := $(patsubst %.c,$(O)/obj/%.o,$(LIB_KUBE_SRCS))
KUBE_PKGS := libcurl
KUBE_CFLAGS ?= $(shell $(PKG_CONFIG) --cflags $(KUBE_PKGS) 2>/dev/null)
KUBE_LIBS ?= $(shell $(PKG_CONFIG) --libs $(KUBE_PKGS) 2>/dev/null)
FV_DRIVER_LIST := $(foreach d,$(DRIVERS),X($(d)))

# The version (docs/design.md, "Versions and logs"): in a git checkout `git describe`
# (a tag v<X> gives X[-N-g<hash>][-dirty]; without a tag, VERSION+g<hash>[-dirty]);
# in a tree without git (a release tarball) the VERSION file alone.
FV_VERSION := $(shell if [ -e .git ] && command -v git >/dev/null 2>&1; then \
	git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null | sed 's/^v//' | grep . || \
	echo "$$(cat VERSION)+g$$(git describe --always --dirty --abbrev=12)"; \
	else cat VERSION 2>/dev/null || echo unknown; fi)

WARN := -Wall -Wextra -Wformat=2 -Wshadow -Wundef -Wvla -Wwrite-strings \
	-Wmissing-prototypes -Wstrict-prototypes -Wold-style-definition \
	-Wpointer-arith -Wsign-compare -Wtype-limits -Wno-unused-parameter \
	-Wimplicit-fallthrough -Werror=implicit-function-declaration \
	-Wno-format-truncation
CFLAGS   ?= -O2 -g
FV_CFLAGS := -std=gnu11 -D_GNU_SOURCE -Iinclude $(WARN) -Werror \
	$(shell $(PKG_CONFIG) --cflags $(PKGS) 2>/dev/null)
FV_LIBS  := $(shell $(PKG_CONFIG) --libs $(PKGS) 2>/dev/null)
# FV_FAULT="NAME ...": a build with deliberate defects (each #ifdef FV_FAULT_<NAME> in a
# driver), to show once that a lane's cases fail on them (tests/kube/vmnode.mk,
# check-kube-vm-faults).  Never into the default build directory.
ifneq ($(FV_FAULT),)
ifeq ($(O),build)
$(error FV_FAULT builds go into a build directory of their own: add O=build/fault)
endif
FV_CFLAGS += $(foreach f,$(FV_FAULT),-DFV_FAULT_$(f))
endif
ifneq ($(SANITIZE),)
FV_CFLAGS += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS   += -fsanitize=$(SANITIZE)
endif

ifeq ($(V),1)
Q :=
else
Q := @
endif

.DELETE_ON_ERROR:
.PHONY: all check check-unit check-sim bench bench-cycle demo clean print-version

all: $(addprefix $(O)/,$(DRIVERS))

OBJS := $(patsubst %.c,$(O)/obj/%.o,$(FV_SRCS))

$(O)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@[ -n "$(Q)" ] && echo "  CC      $<" || true
	$(Q)$(CC) $(FV_CFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

$(O)/obj/drivers/registry.o: FV_CFLAGS += -DFV_DRIVERS='$(FV_DRIVER_LIST)'
$(O)/obj/drivers/registry.o: Makefile $(O)/drivers.list

$(O)/obj/src/version.o: FV_CFLAGS += -DFV_VERSION='"$(FV_VERSION)"'
$(O)/obj/src/version.o: $(O)/version.txt

# rewritten only when the version changes, so only version.o is rebuilt
$(O)/version.txt: FORCE
	@mkdir -p $(dir $@)
	@echo '$(FV_VERSION)' | cmp -s - $@ || echo '$(FV_VERSION)' >$@

print-version:
	@echo '$(FV_VERSION)'

# the registry is rebuilt when a driver directory comes or goes (the list is rewritten only on change)
$(O)/drivers.list: FORCE
	@mkdir -p $(dir $@)
	@echo '$(FV_DRIVER_LIST)' | cmp -s - $@ || echo '$(FV_DRIVER_LIST)' >$@

.PHONY: FORCE
FORCE:

# FV_LDDEPS: files the link reads besides the objects (the static build's linker script)
$(O)/flexvol: $(OBJS) $(FV_LDDEPS)
	@[ -n "$(Q)" ] && echo "  LD      $@" || true
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(OBJS) $(FV_LIBS)

$(addprefix $(O)/,$(DRIVERS)): $(O)/flexvol
	$(Q)cp -f $< $@.tmp && mv -f $@.tmp $@

-include $(OBJS:.o=.d) $(LIB_OBJS:.o=.d) $(LIB_KUBE_OBJS:.o=.d)

# only lib/kube.c includes curl (its -I may name the host's multiarch include dir)
$(O)/obj/lib/kube.o: FV_CFLAGS += $(KUBE_CFLAGS)

# --- tests -----------------------------------------------------------------
UNIT_SRCS  := $(sort $(wildcard tests/unit/test-*.c))
UNIT_BINS  := $(patsubst tests/unit/%.c,$(O)/tests/%,$(UNIT_SRCS))
CORE_OBJS  := $(patsubst %.c,$(O)/obj/%.o,$(filter-out src/main.c,$(CORE_SRCS)))

$(O)/tests/%: tests/unit/%.c $(CORE_OBJS) tests/unit/unit.h
	@mkdir -p $(dir $@)
	@[ -n "$(Q)" ] && echo "  TEST-CC $<" || true
	$(Q)$(CC) $(FV_CFLAGS) $(CFLAGS) -Itests/unit -MMD -MP -MF $@.d $(LDFLAGS) -o $@ $< $(CORE_OBJS) $(FV_LIBS)

# a unit test may include a driver's source (test-iscsi-view.c): rebuilt when it changes
-include $(UNIT_BINS:=.d)

check-unit: $(UNIT_BINS)
	$(Q)tests/unit/run $(UNIT_BINS)

check-sim: all
	$(Q)python3 tests/sim/run.py --build $(O)

check: all $(UNIT_BINS)
	$(Q)tests/check $(O) $(UNIT_BINS)

demo: all
	$(Q)python3 tests/sim/demo.py --build $(O)

$(O)/floor: tests/bench/floor.c
	@mkdir -p $(dir $@)
	$(Q)$(CC) -O2 -static -o $@ $<

$(O)/kfloor: tests/bench/kfloor.c
	@mkdir -p $(dir $@)
	$(Q)$(CC) -O2 -static -o $@ $<

# The previous release, built from git for the A/B columns of the cycle bench
# (tests/bench/cycle.py --old): BENCH_OLD_REV archived into $(BENCH_OLD).src,
# built dynamic and static (its `make static`, on the same cached static
# dependencies as ours when ci/build-static-deps is unchanged).
# 5dea544: main as stop 45 landed it (issue 41's third round; its second used b71d372, issue
# 29's tables 01d4831)
BENCH_OLD_REV ?= 5dea544
BENCH_OLD     ?= $(O)/old-$(BENCH_OLD_REV)
$(BENCH_OLD)/loop:
	$(Q)rm -rf $(BENCH_OLD).src && mkdir -p $(BENCH_OLD).src
	$(Q)git archive $(BENCH_OLD_REV) | tar -x -C $(BENCH_OLD).src
	$(Q)$(MAKE) -C $(BENCH_OLD).src O=$(abspath $(BENCH_OLD)) all

$(BENCH_OLD)/static/loop: $(BENCH_OLD)/loop
	$(Q)$(MAKE) -C $(BENCH_OLD).src O=$(abspath $(BENCH_OLD)) static

$(BENCH_OLD)/static/flexvol-csi: $(BENCH_OLD)/loop
	$(Q)$(MAKE) -C $(BENCH_OLD).src O=$(abspath $(BENCH_OLD)) static-csi

# the attach cycle per op against the exec and kernel floors and the previous
# release: the static builds (what ships), the dynamic ones beside them
bench-cycle: all static $(O)/floor $(O)/kfloor $(BENCH_OLD)/loop $(BENCH_OLD)/static/loop
	$(Q)python3 tests/bench/cycle.py --build $(O) --old $(BENCH_OLD) --dynamic

# the static binary is what ships: it is measured next to the dynamic one
bench: all static $(O)/floor $(O)/kfloor $(BENCH_OLD)/loop $(BENCH_OLD)/static/loop
	$(Q)python3 tests/bench/bench.py --build $(O) --static $(O)/static
	$(Q)python3 tests/bench/cycle.py --build $(O) --old $(BENCH_OLD) --dynamic

clean:
	rm -rf $(O)

# Optional lanes own their own fragments (VM lane, static build, ...).
-include $(sort $(wildcard tests/vm/*.mk deploy/*.mk provisioner/*.mk migrate/*.mk tests/kube/*.mk csi/*.mk tests/fuzz/*.mk tests/layout/*.mk))
