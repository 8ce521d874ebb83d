# deploy/release.mk - make release VERSION=x.y.z [RELEASE_IMAGE=REGISTRY/flexvol/installer]
#
# The artefacts a cluster consumes (deploy/release.sh has the list): the installer image for
# amd64 and arm64 as one OCI image index archive, the rendered manifests of every overlay and
# component combination and the Helm chart, both pinned to the index's digest, the CHANGELOG.md
# entry and SHA256SUMS, in build/release/VERSION/.  VERSION must be the VERSION file's (bump
# it and write the CHANGELOG.md entry first); the drivers are built with that version compiled
# in (no +g<commit>).  Root (buildah), as make check-multiarch.

RELEASE_IMAGE ?= registry.example.com/flexvol/installer
RELEASE_O     ?= $(O)/release/$(VERSION)

.PHONY: release

release:
	$(Q)[ -n "$(VERSION)" ] || { echo "make release VERSION=x.y.z" >&2; exit 1; }
	$(Q)[ "$(VERSION)" = "$$(cat VERSION)" ] || { echo "release: VERSION=$(VERSION) but the VERSION file says $$(cat VERSION)" >&2; exit 1; }
	$(Q)for a in amd64 arm64; do $(MAKE) --no-print-directory image-context ARCH=$$a FV_VERSION=$(VERSION) || exit 1; done
	$(Q)deploy/release.sh $(VERSION) $(RELEASE_O) $(RELEASE_IMAGE)
