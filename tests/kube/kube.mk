# tests/kube/kube.mk - the cluster lane: flexvol through a real single-node Kubernetes.
# Included by the top Makefile (-include tests/kube/*.mk).
#
#   make check-kube         build (or reuse) the pinned components (tests/kube/build), the
#                           images (pause, busybox, the installer image of `make image-context`,
#                           built with buildah: tests/kube/build-images), start the cluster on
#                           127.0.0.1, run tests/kube/run.py, tear everything down (root)
#   make kube-components    only the Go build of the components (cached)
#   make kube-down          tear down what a crashed run left (processes, mounts, loop devices)
#   KUBE_ARGS="-k loop"     pass arguments to tests/kube/run.py (-k NAME selects cases)
KUBE_IMAGES := $(O)/kube-images
.PHONY: check-kube kube-components kube-images kube-down

kube-components:
	$(Q)tests/kube/build

kube-images: image-context
	$(Q)FLEXVOL_IMAGE_CONTEXT=$(CURDIR)/$(IMAGE_O) tests/kube/build-images $(KUBE_IMAGES)

check-kube: kube-components kube-images
	$(Q)FLEXVOL_KUBE_BIN="$$(tests/kube/build | tail -1)" python3 tests/kube/run.py --images $(KUBE_IMAGES) $(KUBE_ARGS)

kube-down:
	$(Q)python3 tests/kube/cluster.py down
