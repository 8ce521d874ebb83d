# The admission policy (deploy/policy/, docs/security.md).
#
#   make check-policy    its CEL compiled and evaluated offline (tests/policy/: cel-go,
#                        fetched from the Go module proxy at the version go.sum pins) on
#                        every example of tests/kube/policy/ (allowed and refused), on
#                        updates, and on the PVs the real flexvol-provisioner, flexvol-csi
#                        (CreateVolume; tests/csi/build's csi-call) and migrate make;
#                        needs Go >= 1.22 (go in PATH or /usr/local/go/bin), root (loop
#                        images' owner records are trusted.* attributes).
#                        make check-deploy renders it in every overlay; the real API
#                        server runs the same examples in the real-cluster lane (tests/kube/).

#   make policy-keys     rewrite the policy's option key lists from the drivers' code
#                        (deploy/policy/gen-keys; check-deploy fails while they differ)

.PHONY: check-policy policy-keys

policy-keys:
	$(Q)deploy/policy/gen-keys

check-policy: $(O)/flexvol-provisioner $(O)/flexvol-csi
	$(Q)python3 tests/policy/run --build $(O)
