# csi/csi.mk - flexvol-csi, the CSI endpoint of the flexvol drivers (docs/design.md, "CSI").
# Included by the top Makefile.  Outside `make` and `make check` (CI runs check-csi and
# check-static-csi in lanes of their own): it needs libnghttp2-dev, libprotobuf-c-dev,
# protobuf-c-compiler and libprotobuf-dev (ci/deps-csi).
#
#   make csi                build/flexvol-csi
#   make check-csi-sanity   csi-sanity (kubernetes-csi/csi-test, built from its Go module by
#                           tests/csi/build, cached), every spec the driver's services reach, against
#                           flexvol-csi --driver D for each D in CSI_SANITY_DRIVERS, then loop's
#                           raw block volumes (--csi.testvolumeaccesstype block) (root)
#   make bench-csi          (part of make bench) the loop node cycle through CSI beside
#                           FlexVolume, and the endpoint's memory (tests/bench/csi.py)
#   make check-csi          the endpoint's own tests (tests/csi/run-node: stage/publish of loop
#                           volumes on real loop devices, bad requests, malformed gRPC frames),
#                           then check-csi-sanity (root)
#
# The C of the CSI messages is generated at build time from csi/spec/csi.proto by protoc-c
# (build/csi-gen/), with the well-known types it imports (timestamp, wrappers; descriptor.proto
# only for its header: the spec's option extensions, which protobuf-c does not generate).

CSI_PKGS      := libnghttp2 libprotobuf-c
CSI_PROTO_INC ?= /usr/include
PROTOC_C      ?= protoc-c
CSI_GEN       := $(O)/csi-gen
CSI_PROTOS    := csi.proto google/protobuf/timestamp.proto google/protobuf/wrappers.proto
CSI_GEN_SRCS  := $(CSI_GEN)/csi.pb-c.c $(CSI_GEN)/google/protobuf/timestamp.pb-c.c \
	$(CSI_GEN)/google/protobuf/wrappers.pb-c.c
CSI_GEN_OBJS  := $(patsubst $(CSI_GEN)/%.c,$(O)/obj/csi-gen/%.o,$(CSI_GEN_SRCS))
CSI_SRCS      := $(sort $(wildcard csi/*.c))
CSI_OBJS      := $(patsubst %.c,$(O)/obj/%.o,$(CSI_SRCS))
# the op layer and every driver, as build/flexvol links them, and the same driver list
# (drivers/registry.c built again without the FlexVolume program's main())
CSI_FV_OBJS   := $(CORE_OBJS) $(patsubst %.c,$(O)/obj/%.o,$(DRV_SRCS)) $(O)/obj/csi/registry.o
# lib/: the loop images and the owner-recorded directories, shared with flexvol-provisioner
CSI_FV_OBJS   += $(LIB_OBJS)
CSI_CFLAGS    := $(shell $(PKG_CONFIG) --cflags $(CSI_PKGS) 2>/dev/null)
CSI_LIBS      ?= $(shell $(PKG_CONFIG) --libs $(CSI_PKGS) 2>/dev/null)
CSI_SANITY_DRIVERS ?= loop nfs iscsi

.PHONY: csi check-csi check-csi-sanity

csi: $(O)/flexvol-csi

# protoc-c writes the .c and .h of each .proto; the stamp stands for all of them
$(CSI_GEN)/.stamp: csi/spec/csi.proto csi/csi.mk
	@mkdir -p $(CSI_GEN)
	@[ -n "$(Q)" ] && echo "  PROTOC  $<" || true
	$(Q)$(PROTOC_C) -Icsi/spec -I$(CSI_PROTO_INC) --c_out=$(CSI_GEN) $(CSI_PROTOS) \
		google/protobuf/descriptor.proto
	$(Q)touch $@

$(CSI_GEN_SRCS): $(CSI_GEN)/.stamp ;

# generated code: its own warnings are not ours to fix
$(O)/obj/csi-gen/%.o: $(CSI_GEN)/%.c $(CSI_GEN)/.stamp
	@mkdir -p $(dir $@)
	@[ -n "$(Q)" ] && echo "  CC      $<" || true
	$(Q)$(CC) -std=gnu11 -I$(CSI_GEN) $(CSI_CFLAGS) $(CFLAGS) -c -o $@ $<

$(CSI_OBJS): FV_CFLAGS += -I$(CSI_GEN) -Icsi $(CSI_CFLAGS)
$(CSI_OBJS): | $(CSI_GEN)/.stamp
$(O)/obj/csi/registry.o: drivers/registry.c Makefile $(O)/drivers.list
	@mkdir -p $(dir $@)
	@[ -n "$(Q)" ] && echo "  CC      $< (the list only)" || true
	$(Q)$(CC) $(FV_CFLAGS) -DFV_DRIVERS='$(FV_DRIVER_LIST)' -DFV_REGISTRY_LIST_ONLY $(CFLAGS) \
		-MMD -MP -c -o $@ $<

$(O)/flexvol-csi: $(CSI_OBJS) $(CSI_GEN_OBJS) $(CSI_FV_OBJS)
	@[ -n "$(Q)" ] && echo "  LD      $@" || true
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(CSI_OBJS) $(CSI_GEN_OBJS) $(CSI_FV_OBJS) \
		$(CSI_LIBS) $(FV_LIBS)

check-csi-sanity: $(O)/flexvol-csi
	$(Q)set -e; for d in $(CSI_SANITY_DRIVERS); do tests/csi/run-sanity --build $(O) --driver $$d; done
	$(Q)tests/csi/run-sanity --build $(O) --driver loop --access-type block

check-csi: $(O)/flexvol-csi
	$(Q)tests/csi/run-node --build $(O)
	$(Q)$(MAKE) --no-print-directory check-csi-sanity

-include $(CSI_OBJS:.o=.d)

# --- static flexvol-csi (beside deploy/static.mk's drivers and provisioner/static.mk's provisioner)
#
#   make static-csi [ARCH=arm64]   $(STATIC_O)/flexvol-csi: glibc -static, stripped, on the static
#                                  prefix of ci/build-static-deps (json-c, libmount, libblkid,
#                                  libudev) and Debian's own libnghttp2.a and libprotobuf-c.a of
#                                  ARCH (ci/deps-csi --arch ARCH installs them: the same
#                                  security-patched code as the host's shared libraries)
#   make check-static-csi [ARCH=]  it answers --version and Probe... in an empty chroot
#                                  (qemu-user for a cross build): tests/csi/static-smoke
#
# protoc-c runs on the build machine; the generated C is the same for every ARCH.
CSI_STATIC_LIBS = /usr/lib/$(STATIC_TRIPLET_$(ARCH))/libnghttp2.a \
	/usr/lib/$(STATIC_TRIPLET_$(ARCH))/libprotobuf-c.a

.PHONY: static-csi check-static-csi

static-csi: static
	$(Q)ci/deps-csi --arch $(ARCH) >/dev/null
	$(Q)set -e; p=$$($(STATIC_DEPS) --print-prefix); \
	libs=$$(PKG_CONFIG_LIBDIR=$$p/lib/pkgconfig PKG_CONFIG_PATH= $(PKG_CONFIG) --static --libs $(PKGS)); \
	rc=0; PKG_CONFIG_LIBDIR=$$p/lib/pkgconfig PKG_CONFIG_PATH= \
		$(MAKE) --no-print-directory O=$(STATIC_O) SANITIZE= $(STATIC_CROSS) \
		CFLAGS='$(STATIC_CFLAGS)' LDFLAGS='$(STATIC_LDFLAGS)' FV_LIBS="$$libs" \
		CSI_LIBS="$(CSI_STATIC_LIBS)" CSI_CFLAGS= \
		$(STATIC_O)/flexvol-csi > $(STATIC_O)/csi-build.log 2>&1 || rc=$$?; \
	grep -v -E "$(STATIC_NSS_NOISE)" $(STATIC_O)/csi-build.log || true; \
	[ $$rc = 0 ] || exit $$rc; \
	file -b $(STATIC_O)/flexvol-csi | grep -q 'statically linked' || \
		{ echo "static: $(STATIC_O)/flexvol-csi is not statically linked" >&2; exit 1; }; \
	file -b $(STATIC_O)/flexvol-csi | grep -q '$(STATIC_FILE_$(ARCH))' || \
		{ echo "static: $(STATIC_O)/flexvol-csi is not for $(ARCH): $$(file -b $(STATIC_O)/flexvol-csi)" >&2; exit 1; }; \
	echo "  STATIC  $(STATIC_O)/flexvol-csi: $$(stat -c %s $(STATIC_O)/flexvol-csi) bytes, statically linked, $(ARCH)"

# the installer image's /flexvol/csi/ (deploy/Containerfile; deploy/csi runs it from there) and
# the licences of what flexvol-csi links besides the drivers' libraries: nghttp2 (MIT),
# protobuf-c (BSD-2-Clause)
define image-context-csi
mkdir -p $(IMAGE_O)/csi && cp $(STATIC_O)/flexvol-csi $(IMAGE_O)/csi/ && \
	cp /usr/share/doc/libnghttp2-14/copyright $(IMAGE_O)/LICENSES/nghttp2.copyright && \
	cp /usr/share/doc/libprotobuf-c1/copyright $(IMAGE_O)/LICENSES/protobuf-c.copyright
endef

check-static-csi: static-csi
	$(Q)tests/csi/static-smoke --bin $(STATIC_O)/flexvol-csi $(if $(STATIC_CROSS),--emulator $(STATIC_QEMU))

# make bench's CSI figures: the loop node cycle through flexvol-csi beside the FlexVolume calls
# doing the same work and the previous release's endpoint (BENCH_OLD, Makefile), and the
# endpoint's memory (tests/bench/csi.py; root)
.PHONY: bench-csi
bench: bench-csi
bench-csi: static-csi $(O)/kfloor $(BENCH_OLD)/static/flexvol-csi
	$(Q)python3 tests/bench/csi.py --build $(O) --old $(BENCH_OLD)
