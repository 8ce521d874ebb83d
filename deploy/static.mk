# deploy/static.mk - fully static drivers, the installer image context, and their checks.
# Included by the top Makefile (-include deploy/*.mk).
#
#   make static          build/static/flexvol (glibc, -static -Wl,--gc-sections, stripped)
#                        and build/static/<driver> for every driver in $(DRIVERS)
#   make check-static    the distroless check: every static driver alone in an empty
#                        chroot, ops as kube-controller-manager runs them (root)
#   make check-deploy    installer test (atomic, idempotent install.sh, validate, uninstall,
#                        readiness) + manifest validation (kustomize overlays rendered, with
#                        every combination of the components), the Helm chart against them
#                        (tests/static/helm-test; helm from tests/kube/build-helm, cached), the
#                        version of a tree without git, the logrotate snippet
#   make image-context   build/image/: the OCI build context for deploy/Containerfile
#   make check-image     the image assembled by hand from that context (no engine needed)
#                        and run as the DaemonSet runs it (root); the documented podman,
#                        buildah and docker build commands against those engines' --help
#
#   ARCH=arm64           any of the above for another architecture (Debian name;
#                        default: this machine's): a cross build with Debian's
#                        gcc-aarch64-linux-gnu into build/static-arm64/ and
#                        build/image-arm64/; check-static runs the chroot checks
#                        and the unit tests (built static for ARCH) under
#                        Debian's qemu-user-static.  The build machine's own
#                        architecture keeps build/static and build/image.
#
# The static json-c/libmount/libblkid/libudev come from ci/build-static-deps (a
# cached prefix; the first run builds util-linux and systemd's libudev from
# Debian source, later runs return at once).  The objects are compiled from
# the same $(FV_SRCS) by re-running this Makefile with O=$(O)/static and
# pkg-config pointed at the static prefix.

# --- the target architecture: one block per ARCH, the rest is common
STATIC_HOST_ARCH := $(shell dpkg --print-architecture 2>/dev/null || echo amd64)
ARCH            ?= $(STATIC_HOST_ARCH)
override ARCH   := $(patsubst x86_64,amd64,$(patsubst aarch64,arm64,$(ARCH)))
# amd64
STATIC_TRIPLET_amd64 := x86_64-linux-gnu
STATIC_FILE_amd64    := x86-64
STATIC_QEMU_amd64    := qemu-x86_64-static
# arm64
STATIC_TRIPLET_arm64 := aarch64-linux-gnu
STATIC_FILE_arm64    := ARM aarch64
STATIC_QEMU_arm64    := qemu-aarch64-static

ifeq ($(ARCH),$(STATIC_HOST_ARCH))
STATIC_O        := $(O)/static
IMAGE_O         := $(O)/image
STATIC_CROSS    :=
else
STATIC_O        := $(O)/static-$(ARCH)
IMAGE_O         := $(O)/image-$(ARCH)
STATIC_CROSS    := CC=$(STATIC_TRIPLET_$(ARCH))-gcc
# the emulator runs the binaries of ARCH (copied into the chroot for check-static)
STATIC_QEMU     := $(STATIC_QEMU_$(ARCH))
endif
STATIC_DEPS     := ci/build-static-deps --arch $(ARCH)
STATIC_CFLAGS   ?= -O2 -ffunction-sections -fdata-sections
STATIC_LDFLAGS  ?= -static -Wl,--gc-sections -s
# The drivers' link only: deploy/static-hot.ld puts the code and data the non-I/O calls run
# first (deploy/hot-sections; docs/benchmarks.md); the drivers are relinked when it changes.
STATIC_HOT_LD   := deploy/static-hot.ld
STATIC_HOT_LDFLAGS ?= -Wl,-T,$(STATIC_HOT_LD)
st_empty        :=
st_space        := $(st_empty) $(st_empty)
st_comma        := ,
# glibc's "getpwnam in statically linked applications" warnings and their
# "in function" lines: expected (deploy/README.md), filtered from the output.
STATIC_NSS_NOISE := warning: Using '(getpw|getgr)[a-z_]*' in statically linked|in function .(fvsd_(get_user_creds|get_group_creds|gid_to_name|uid_to_name)|mnt_get_(uid|gid|username|groupname)).:$$

.PHONY: static static-hot-ld static-deps static-unit check-static check-deploy image-context check-image check-multiarch

static-deps:
	$(Q)$(STATIC_DEPS)

# The prefix path is recorded in $(STATIC_O)/.prefix: when it changes (new
# key: a security update of util-linux/systemd, or a new script), every
# static object is rebuilt, since their dependency files do not notice it.
static: static-deps
	$(Q)set -e; p=$$($(STATIC_DEPS) --print-prefix); \
	mkdir -p $(STATIC_O); \
	if [ "$$(cat $(STATIC_O)/.prefix 2>/dev/null)" != "$$p $(STATIC_CFLAGS) $(STATIC_LDFLAGS)" ]; then \
		rm -rf $(STATIC_O)/obj $(STATIC_O)/flexvol; \
		echo "$$p $(STATIC_CFLAGS) $(STATIC_LDFLAGS)" > $(STATIC_O)/.prefix; \
	fi; \
	pc="env PKG_CONFIG_LIBDIR=$$p/lib/pkgconfig PKG_CONFIG_PATH= $(PKG_CONFIG)"; \
	libs=$$($$pc --static --libs $(PKGS)); \
	rc=0; PKG_CONFIG_LIBDIR=$$p/lib/pkgconfig PKG_CONFIG_PATH= \
		$(MAKE) --no-print-directory O=$(STATIC_O) SANITIZE= $(STATIC_CROSS) \
		CFLAGS='$(STATIC_CFLAGS)' LDFLAGS='$(STATIC_LDFLAGS) $(STATIC_HOT_LDFLAGS)' FV_LIBS="$$libs" \
		FV_LDDEPS='$(if $(STATIC_HOT_LDFLAGS),$(STATIC_HOT_LD))' \
		$(addprefix $(STATIC_O)/,$(DRIVERS)) > $(STATIC_O)/build.log 2>&1 || rc=$$?; \
	grep -v -E "$(STATIC_NSS_NOISE)" $(STATIC_O)/build.log || true; \
	n=$$(grep -c -E "warning: Using '(getpw|getgr)" $(STATIC_O)/build.log || true); \
	[ "$$n" = 0 ] || echo "  NOTE    $$n expected glibc NSS link warnings (libudev/libmount user and group name code, never called by the drivers): $(STATIC_O)/build.log"; \
	[ $$rc = 0 ] || exit $$rc; \
	for d in $(DRIVERS); do \
		file -b $(STATIC_O)/$$d | grep -q 'statically linked' || \
			{ echo "static: $(STATIC_O)/$$d is not statically linked: $$(file -b $(STATIC_O)/$$d)" >&2; exit 1; }; \
		file -b $(STATIC_O)/$$d | grep -q '$(STATIC_FILE_$(ARCH))' || \
			{ echo "static: $(STATIC_O)/$$d is not for $(ARCH) ($(STATIC_FILE_$(ARCH))): $$(file -b $(STATIC_O)/$$d)" >&2; exit 1; }; \
	done; \
	echo "  STATIC  $(STATIC_O)/{$(subst $(st_space),$(st_comma),$(DRIVERS))}: $$(stat -c %s $(STATIC_O)/flexvol) bytes, statically linked, $(ARCH)"

# deploy/static-hot.ld again, from an unstripped static build of today's code and its link map
# in $(O)/hot/static (needs valgrind): after a change to what the non-I/O calls run
static-hot-ld:
	$(Q)$(MAKE) --no-print-directory O=$(O)/hot static STATIC_HOT_LDFLAGS= \
		STATIC_LDFLAGS='-static -Wl,--gc-sections -Wl,-Map,$(abspath $(O))/hot/static/flexvol.map'
	$(Q)deploy/hot-sections --static $(O)/hot/static --out $(STATIC_HOT_LD)

# static-kube-program NAME: $(STATIC_O)/NAME, a program on lib's API client (the kube* group:
# flexvol-provisioner, provisioner/static.mk; flexvol-migrate, migrate/static.mk), glibc -static
# and stripped.  libcurl comes from ci/build-static-curl (a cached minimal http/https build on
# OpenSSL from Debian source: Debian's libcurl.a needs gssapi, ldap, psl, ... without static
# libraries); when its prefix changes, lib/kube.o (curl's headers) and NAME are built again.
# glibc's static-link warnings: getaddrinfo (curl's resolver: NSS "files" and "dns" are inside
# libc.a since glibc 2.34; the in-cluster server is an IP literal anyway; gethostbyname:
# OpenSSL BIO code never called), dlopen (OpenSSL's DSO loader, never used: no engines or
# providers are loaded), and the NSS user/group ones above: counted, not shown.
STATIC_CURL := ci/build-static-curl --arch $(ARCH)
STATIC_KUBE_NOISE := warning: Using '(getaddrinfo|gethostbyname|dlopen|getpw[a-z_]*|getgr[a-z_]*)' in statically linked|in function .[A-Za-z0-9_]+.:$$
define static-kube-program
$(STATIC_CURL) | tail -n 1 | grep -v '^prefix:' || true; \
set -e; p=$$($(STATIC_DEPS) --print-prefix); c=$$($(STATIC_CURL) --print-prefix); \
if [ "$$(cat $(STATIC_O)/.prefix-curl-$(1) 2>/dev/null)" != "$$c" ]; then \
	rm -f $(STATIC_O)/obj/lib/kube.o $(STATIC_O)/$(1); \
	echo "$$c" > $(STATIC_O)/.prefix-curl-$(1); \
fi; \
pc="env PKG_CONFIG_LIBDIR=$$p/lib/pkgconfig:$$c/lib/pkgconfig PKG_CONFIG_PATH= $(PKG_CONFIG)"; \
libs=$$($$pc --static --libs $(PKGS)); \
clibs=$$($$pc --static --libs $(KUBE_PKGS)); \
cflags=$$($$pc --cflags $(KUBE_PKGS)); \
rc=0; PKG_CONFIG_LIBDIR=$$p/lib/pkgconfig PKG_CONFIG_PATH= \
	$(MAKE) --no-print-directory O=$(STATIC_O) SANITIZE= $(STATIC_CROSS) \
	CFLAGS='$(STATIC_CFLAGS)' LDFLAGS='$(STATIC_LDFLAGS)' FV_LIBS="$$libs" \
	KUBE_LIBS="$$clibs" KUBE_CFLAGS="$$cflags" \
	$(STATIC_O)/$(1) > $(STATIC_O)/$(1)-build.log 2>&1 || rc=$$?; \
grep -v -E "$(STATIC_KUBE_NOISE)" $(STATIC_O)/$(1)-build.log || true; \
n=$$(grep -c -E "warning: Using '" $(STATIC_O)/$(1)-build.log || true); \
[ "$$n" = 0 ] || echo "  NOTE    $$n expected glibc static-link warnings (getaddrinfo, dlopen, NSS; see deploy/static.mk): $(STATIC_O)/$(1)-build.log"; \
[ $$rc = 0 ] || exit $$rc; \
file -b $(STATIC_O)/$(1) | grep -q 'statically linked' || \
	{ echo "static: $(STATIC_O)/$(1) is not statically linked" >&2; exit 1; }; \
file -b $(STATIC_O)/$(1) | grep -q '$(STATIC_FILE_$(ARCH))' || \
	{ echo "static: $(STATIC_O)/$(1) is not for $(ARCH): $$(file -b $(STATIC_O)/$(1))" >&2; exit 1; }; \
echo "  STATIC  $(STATIC_O)/$(1): $$(stat -c %s $(STATIC_O)/$(1)) bytes, statically linked, $(ARCH)"
endef

# The unit tests, static for ARCH (a cross build's check-static runs them
# under the emulator: the host lane's make check covers the native build).
STATIC_UNIT_BINS := $(patsubst tests/unit/%.c,$(STATIC_O)/tests/%,$(UNIT_SRCS))
# Tests that may skip under the emulator even in CI: bookworm's qemu-user
# (7.2) answers openat2() with ENOSYS, so fv_open_beneath() cannot be
# exercised there (the host lane and a real arm64 kernel do run it); nor
# can a guest install a seccomp filter there (qemu-user does not emulate
# seccomp), which the no_pidfd_* tests use to take pidfd_open away; nor does
# its statx() call any mount point one (STATX_ATTR_MOUNT_ROOT), which
# mount_by_id_as_the_table_has_it needs to compare the two lookups.
STATIC_UNIT_SKIP_OK := open_beneath,open_regular_beneath,no_pidfd_still_has_a_deadline,no_pidfd_daemon_holding_the_pipe,mount_by_id_as_the_table_has_it
static-unit: static
	$(Q)set -e; p=$$($(STATIC_DEPS) --print-prefix); \
	libs=$$(env PKG_CONFIG_LIBDIR=$$p/lib/pkgconfig PKG_CONFIG_PATH= $(PKG_CONFIG) --static --libs $(PKGS)); \
	rc=0; PKG_CONFIG_LIBDIR=$$p/lib/pkgconfig PKG_CONFIG_PATH= \
		$(MAKE) --no-print-directory O=$(STATIC_O) SANITIZE= $(STATIC_CROSS) \
		CFLAGS='$(STATIC_CFLAGS)' LDFLAGS='$(STATIC_LDFLAGS)' FV_LIBS="$$libs" \
		$(STATIC_UNIT_BINS) > $(STATIC_O)/build-unit.log 2>&1 || rc=$$?; \
	grep -v -E "$(STATIC_NSS_NOISE)" $(STATIC_O)/build-unit.log || true; \
	exit $$rc

check-static: static $(if $(STATIC_CROSS),static-unit)
	$(Q)tests/static/chroot-test --build $(STATIC_O) \
		$(if $(STATIC_CROSS),--arch $(ARCH) --emulator "$$(command -v $(STATIC_QEMU))") $(DRIVERS)
ifneq ($(STATIC_CROSS),)
	$(Q)UNIT_EXEC="$$(command -v $(STATIC_QEMU))" UNIT_SKIP_OK=$(STATIC_UNIT_SKIP_OK) \
		tests/unit/run $(STATIC_UNIT_BINS)
endif

check-deploy: all
	$(Q)FLEXVOL_BUILD=$(O) tests/static/installer-test
	$(Q)FLEXVOL_BUILD=$(O) tests/static/manifest-test
	$(Q)tests/static/helm-test
	$(Q)tests/static/docs-test
	$(Q)tests/static/release-test

# The installer image's build context: Containerfile (version filled in), install.sh,
# bin/<driver>, LICENSES/ (third-party licences, LGPL relinking kit),
# and busybox/ (Debian's busybox-static for ARCH and the applet links
# install.sh needs): everything of the image is in the context, so building
# it, for any ARCH, needs no network and no emulator.
#   make image-context && podman build -t flexvol-installer:dev build/image
#   make image-context ARCH=arm64 && podman build --platform linux/arm64 ... build/image-arm64
IMAGE_APPLETS := sh cp mv rm rmdir mkdir chmod cmp stat sync sleep cat ls dirname basename tr printf sed kill nsenter pidof
image-context: static static-csi
	$(Q)rm -rf $(IMAGE_O) && mkdir -p $(IMAGE_O)/bin
	$(Q)sed 's/^ARG FLEXVOL_VERSION=.*/ARG FLEXVOL_VERSION=$(FV_VERSION)/' deploy/Containerfile >$(IMAGE_O)/Containerfile
	$(Q)cp deploy/install.sh deploy/gc.sh $(IMAGE_O)/
	$(Q)deploy/licenses.sh $(IMAGE_O)/LICENSES $(STATIC_O) "$$($(STATIC_DEPS) --print-prefix)" $(if $(STATIC_CROSS),$(STATIC_TRIPLET_$(ARCH))-gcc,$(CC))
	$(Q)for d in $(DRIVERS); do cp $(STATIC_O)/$$d $(IMAGE_O)/bin/$$d; done
	$(Q)cp "$$($(STATIC_DEPS) --print-prefix)/BUILDINFO" $(IMAGE_O)/BUILDINFO.static-deps
	$(Q)BUSYBOX_LICENSE_DIR=$(IMAGE_O)/LICENSES/busybox ci/fetch-busybox $(ARCH) $(IMAGE_O)/busybox $(IMAGE_APPLETS) >> $(IMAGE_O)/BUILDINFO.static-deps
	$(Q)$(image-context-provisioner)
	$(Q)$(image-context-migrate)
	$(Q)$(image-context-csi)
	$(Q)echo "  IMAGE   $(IMAGE_O) ($(ARCH)): $$(ls $(IMAGE_O)/bin | tr '\n' ' ')+ $$(tail -1 $(IMAGE_O)/BUILDINFO.static-deps)"

# a cross image runs through the kernel's binfmt_misc (busybox sh exec()s applets)
check-image: image-context
ifneq ($(STATIC_CROSS),)
	$(Q)tests/static/binfmt-qemu $(patsubst qemu-%-static,%,$(STATIC_QEMU))
endif
	$(Q)tests/static/image-test $(IMAGE_O)
	$(Q)tests/static/build-commands-test $(IMAGE_O)

# The two-architecture image as deploy/README.md builds it (buildah bud
# --platform --manifest, manifest push --all), into a local OCI layout: one
# index over both, each image with its context's files (root; installs buildah).
MULTIARCH_ARCHS := amd64 arm64
check-multiarch:
	$(Q)for a in $(MULTIARCH_ARCHS); do $(MAKE) --no-print-directory image-context ARCH=$$a || exit 1; done
	$(Q)tests/static/multiarch-test $(foreach a,$(MULTIARCH_ARCHS),$(O)/image$(if $(filter $(a),$(STATIC_HOST_ARCH)),,-$(a)):$(a))
