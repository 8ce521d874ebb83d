# provisioner/static.mk - the static flexvol-provisioner for the image.
# Kept apart from deploy/static.mk (which it builds on: STATIC_O, STATIC_DEPS,
# STATIC_CFLAGS/LDFLAGS, the static json-c/libmount/libblkid/libudev prefix).
#
#   make static-provisioner        build/static/flexvol-provisioner (glibc -static, stripped)
#   make check-static-provisioner  it, alone in an empty chroot, against the fake API
#                                  server over HTTPS (tests/provisioner/run.py --chroot)
#   make static-provisioner ARCH=arm64, check-static-provisioner ARCH=arm64
#                                  the same cross-built (build/static-arm64/), checked
#                                  under qemu-user in the chroot (--emulator)
#
# libcurl comes from ci/build-static-curl (a cached minimal http/https build on
# OpenSSL from Debian source: Debian's libcurl.a needs gssapi, ldap, psl, ...
# without static libraries).

STATIC_CURL := ci/build-static-curl --arch $(ARCH)
# glibc's static-link warnings: getaddrinfo (curl's resolver: NSS "files" and
# "dns" are inside libc.a since glibc 2.34; the in-cluster server is an IP
# literal anyway; gethostbyname: OpenSSL BIO code never called), dlopen (OpenSSL's DSO loader, never used: no engines or
# providers are loaded), and the NSS user/group ones of deploy/static.mk.
PROV_STATIC_NOISE := warning: Using '(getaddrinfo|gethostbyname|dlopen|getpw[a-z_]*|getgr[a-z_]*)' in statically linked|in function .[A-Za-z0-9_]+.:$$

.PHONY: static-provisioner check-static-provisioner

static-provisioner: static
	$(Q)$(STATIC_CURL) | tail -n 1 | grep -v '^prefix:' || true
	$(Q)set -e; p=$$($(STATIC_DEPS) --print-prefix); c=$$($(STATIC_CURL) --print-prefix); \
	if [ "$$(cat $(STATIC_O)/.prefix-curl 2>/dev/null)" != "$$c" ]; then \
		rm -rf $(STATIC_O)/obj/provisioner $(STATIC_O)/flexvol-provisioner; \
		echo "$$c" > $(STATIC_O)/.prefix-curl; \
	fi; \
	pc="env PKG_CONFIG_LIBDIR=$$p/lib/pkgconfig:$$c/lib/pkgconfig PKG_CONFIG_PATH= $(PKG_CONFIG)"; \
	libs=$$($$pc --static --libs $(PKGS)); \
	clibs=$$($$pc --static --libs $(PROV_PKGS)); \
	cflags=$$($$pc --cflags $(PROV_PKGS)); \
	rc=0; PKG_CONFIG_LIBDIR=$$p/lib/pkgconfig PKG_CONFIG_PATH= \
		$(MAKE) --no-print-directory O=$(STATIC_O) SANITIZE= $(STATIC_CROSS) \
		CFLAGS='$(STATIC_CFLAGS)' LDFLAGS='$(STATIC_LDFLAGS)' FV_LIBS="$$libs" \
		PROV_LIBS="$$clibs" PROV_CFLAGS="$$cflags" \
		$(STATIC_O)/flexvol-provisioner > $(STATIC_O)/provisioner-build.log 2>&1 || rc=$$?; \
	grep -v -E "$(PROV_STATIC_NOISE)" $(STATIC_O)/provisioner-build.log || true; \
	n=$$(grep -c -E "warning: Using '" $(STATIC_O)/provisioner-build.log || true); \
	[ "$$n" = 0 ] || echo "  NOTE    $$n expected glibc static-link warnings (getaddrinfo, dlopen, NSS; see provisioner/static.mk): $(STATIC_O)/provisioner-build.log"; \
	[ $$rc = 0 ] || exit $$rc; \
	file -b $(STATIC_O)/flexvol-provisioner | grep -q 'statically linked' || \
		{ echo "static: $(STATIC_O)/flexvol-provisioner is not statically linked" >&2; exit 1; }; \
	file -b $(STATIC_O)/flexvol-provisioner | grep -q '$(STATIC_FILE_$(ARCH))' || \
		{ echo "static: $(STATIC_O)/flexvol-provisioner is not for $(ARCH): $$(file -b $(STATIC_O)/flexvol-provisioner)" >&2; exit 1; }; \
	echo "  STATIC  $(STATIC_O)/flexvol-provisioner: $$(stat -c %s $(STATIC_O)/flexvol-provisioner) bytes, statically linked, $(ARCH)"

# Under qemu-user (a cross build) the directory cases cannot run: bookworm's
# qemu answers openat2() with ENOSYS (see STATIC_UNIT_SKIP_OK below); what
# the architecture can get wrong (TLS, the token, the lease, the HTTP
# endpoint, the watch stream) runs there: static_smoke.
check-static-provisioner: static-provisioner
ifeq ($(STATIC_CROSS),)
	$(Q)python3 tests/provisioner/run.py --build $(STATIC_O) --chroot \
		-k provision_basic -k https -k delete_ -k restart_between -k watch_expired \
		-k static_smoke -k leader_election -k metrics_and_probes -k plain_http -k reclaim_only_owned \
		-k metrics_labels_build_process -k log_lines_klog
else
	$(Q)python3 tests/provisioner/run.py --build $(STATIC_O) --chroot \
		--emulator "$$(command -v $(STATIC_QEMU))" -k static_smoke
endif

# deploy/static.mk's image-context calls this after its own copies: the
# provisioner (of the image's ARCH: amd64 and arm64 both) and its
# curl/OpenSSL build record go into the image context.
image-context: static-provisioner
define image-context-provisioner
mkdir -p $(IMAGE_O)/provisioner && cp $(STATIC_O)/flexvol-provisioner $(IMAGE_O)/provisioner/ && \
	cp "$$($(STATIC_CURL) --print-prefix)/BUILDINFO" $(IMAGE_O)/provisioner/BUILDINFO.static-curl && \
	cp /usr/share/doc/libcurl4/copyright $(IMAGE_O)/LICENSES/curl.copyright && \
	cp /usr/share/doc/libssl3/copyright $(IMAGE_O)/LICENSES/openssl.copyright
endef

# test-provisioner's directory cases need openat2(), which bookworm's qemu-user
# answers with ENOSYS: they skip there, as open_beneath does
STATIC_UNIT_SKIP_OK := $(STATIC_UNIT_SKIP_OK),dir_make_idempotent_and_confined,dir_delete_never_follows
STATIC_UNIT_SKIP_OK := $(STATIC_UNIT_SKIP_OK),dir_transfer_moves_the_owner
