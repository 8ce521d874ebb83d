# deploy/static.mk - fully static drivers, the installer image context, and their checks.
# Included by the top Makefile (-include deploy/*.mk).
#
#   make static          build/static/flexvol (glibc, -static -Wl,--gc-sections, stripped)
#                        and build/static/<driver> for every driver in $(DRIVERS)
#   make check-static    the distroless check: every static driver alone in an empty
#                        chroot, ops as kube-controller-manager runs them (root)
#   make check-deploy    installer test (atomic, idempotent install.sh, validate, uninstall,
#                        readiness) + manifest validation (kustomize overlays rendered), the
#                        version of a tree without git, the logrotate snippet
#   make image-context   build/image/: the OCI build context for deploy/Containerfile
#   make check-image     the image assembled by hand from that context (no engine needed)
#                        and run as the DaemonSet runs it (root); the documented podman,
#                        buildah and docker build commands against those engines' --help
#
# The static json-c/libmount/libblkid/libudev come from ci/build-static-deps (a
# cached prefix; the first run builds util-linux and systemd's libudev from
# Debian source, later runs return at once).  The objects are compiled from
# the same $(FV_SRCS) by re-running this Makefile with O=$(O)/static and
# pkg-config pointed at the static prefix.

STATIC_O        := $(O)/static
STATIC_DEPS     := ci/build-static-deps
STATIC_CFLAGS   ?= -O2 -ffunction-sections -fdata-sections
STATIC_LDFLAGS  ?= -static -Wl,--gc-sections -s
IMAGE_O         := $(O)/image
st_empty        :=
st_space        := $(st_empty) $(st_empty)
st_comma        := ,
# glibc's "getpwnam in statically linked applications" warnings and their
# "in function" lines: expected (deploy/README.md), filtered from the output.
STATIC_NSS_NOISE := warning: Using '(getpw|getgr)[a-z_]*' in statically linked|in function .(fvsd_(get_user_creds|get_group_creds|gid_to_name|uid_to_name)|mnt_get_(uid|gid|username|groupname)).:$$

.PHONY: static static-deps check-static check-deploy image-context check-image

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
		$(MAKE) --no-print-directory O=$(STATIC_O) SANITIZE= \
		CFLAGS='$(STATIC_CFLAGS)' LDFLAGS='$(STATIC_LDFLAGS)' FV_LIBS="$$libs" \
		$(addprefix $(STATIC_O)/,$(DRIVERS)) > $(STATIC_O)/build.log 2>&1 || rc=$$?; \
	grep -v -E "$(STATIC_NSS_NOISE)" $(STATIC_O)/build.log || true; \
	n=$$(grep -c -E "warning: Using '(getpw|getgr)" $(STATIC_O)/build.log || true); \
	[ "$$n" = 0 ] || echo "  NOTE    $$n expected glibc NSS link warnings (libudev/libmount user and group name code, never called by the drivers): $(STATIC_O)/build.log"; \
	[ $$rc = 0 ] || exit $$rc; \
	for d in $(DRIVERS); do \
		file -b $(STATIC_O)/$$d | grep -q 'statically linked' || \
			{ echo "static: $(STATIC_O)/$$d is not statically linked: $$(file -b $(STATIC_O)/$$d)" >&2; exit 1; }; \
	done; \
	echo "  STATIC  $(STATIC_O)/{$(subst $(st_space),$(st_comma),$(DRIVERS))}: $$(stat -c %s $(STATIC_O)/flexvol) bytes, statically linked"

check-static: static
	$(Q)tests/static/chroot-test --build $(STATIC_O) $(DRIVERS)

check-deploy: all
	$(Q)FLEXVOL_BUILD=$(O) tests/static/installer-test
	$(Q)FLEXVOL_BUILD=$(O) tests/static/manifest-test
	$(Q)tests/static/docs-test
	$(Q)tests/static/release-test

# The installer image's build context: Containerfile (version filled in), install.sh,
# bin/<driver>, LICENSES/ (third-party licences, LGPL relinking kit).
#   make image-context && podman build -t flexvol-installer:dev build/image
#   (docker: docker build -f build/image/Containerfile -t flexvol-installer:dev build/image)
image-context: static
	$(Q)rm -rf $(IMAGE_O) && mkdir -p $(IMAGE_O)/bin
	$(Q)sed 's/^ARG FLEXVOL_VERSION=.*/ARG FLEXVOL_VERSION=$(FV_VERSION)/' deploy/Containerfile >$(IMAGE_O)/Containerfile
	$(Q)cp deploy/install.sh $(IMAGE_O)/
	$(Q)deploy/licenses.sh $(IMAGE_O)/LICENSES $(STATIC_O) "$$($(STATIC_DEPS) --print-prefix)" $(CC)
	$(Q)for d in $(DRIVERS); do cp $(STATIC_O)/$$d $(IMAGE_O)/bin/$$d; done
	$(Q)cp "$$($(STATIC_DEPS) --print-prefix)/BUILDINFO" $(IMAGE_O)/BUILDINFO.static-deps
	$(Q)echo "  IMAGE   $(IMAGE_O): $$(ls $(IMAGE_O)/bin | tr '\n' ' ')"

check-image: image-context
	$(Q)tests/static/image-test $(IMAGE_O)
	$(Q)tests/static/build-commands-test $(IMAGE_O)
