# migrate/static.mk - the static flexvol-migrate for the image, built as flexvol-provisioner is
# (deploy/static.mk's static-kube-program: glibc -static, ci/build-static-curl's libcurl), for
# amd64 and arm64, and by the same commands: make static-provisioner builds it, make
# check-static-provisioner checks it (and their ARCH=arm64 forms), as CI runs them.
#
#   make static-migrate        build/static/flexvol-migrate (build/static-arm64/ with ARCH=arm64)
#   make check-static-migrate  it, alone in an empty chroot (no libc, no /etc, no /proc), moves a
#                              PV to CSI and back against the fake API server over HTTPS with a
#                              token (tests/provisioner/run.py --chroot -k migrate_static); a
#                              cross build under qemu-user (--emulator)

.PHONY: static-migrate check-static-migrate

static-provisioner: static-migrate
check-static-provisioner: check-static-migrate

static-migrate: static
	$(Q)$(call static-kube-program,flexvol-migrate)

check-static-migrate: static-migrate
	$(Q)python3 tests/provisioner/run.py --build $(STATIC_O) --chroot \
		$(if $(STATIC_CROSS),--emulator "$$(command -v $(STATIC_QEMU))") -k migrate_static

# deploy/static.mk's image-context calls this after the provisioner's: flexvol-migrate beside
# flexvol-provisioner in /flexvol/provisioner/ (deploy/Containerfile)
image-context: static-migrate
define image-context-migrate
mkdir -p $(IMAGE_O)/provisioner && cp $(STATIC_O)/flexvol-migrate $(IMAGE_O)/provisioner/
endef
