# provisioner/static.mk - the static flexvol-provisioner for the image.
# Kept apart from deploy/static.mk (which it builds on: STATIC_O, STATIC_DEPS,
# STATIC_CFLAGS/LDFLAGS, the static json-c/libmount/libblkid/libudev prefix,
# static-kube-program: the link of a program on lib's API client and curl).
#
#   make static-provisioner        build/static/flexvol-provisioner (glibc -static, stripped)
#   make check-static-provisioner  it, alone in an empty chroot, against the fake API
#                                  server over HTTPS (tests/provisioner/run.py --chroot)
#   make static-provisioner ARCH=arm64, check-static-provisioner ARCH=arm64
#                                  the same cross-built (build/static-arm64/), checked
#                                  under qemu-user in the chroot (--emulator)
#
# libcurl comes from ci/build-static-curl (deploy/static.mk, static-kube-program).
# flexvol-migrate (migrate/static.mk) is built and checked with it.

.PHONY: static-provisioner check-static-provisioner

static-provisioner: static
	$(Q)$(call static-kube-program,flexvol-provisioner)

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
