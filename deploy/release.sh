#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
#
# deploy/release.sh VERSION OUTDIR IMAGE - the artefacts of a release (make release VERSION=x.y.z),
# from the image contexts build/image (amd64) and build/image-arm64 (arm64) that make release
# has just built with that version compiled in:
#
#   OUTDIR/flexvol-installer-VERSION.oci.tar  the installer image for linux/amd64 and linux/arm64
#                                             (the drivers, flexvol-provisioner and flexvol-migrate,
#                                             flexvol-csi):
#                                             one OCI image index, as an OCI archive
#                                             (skopeo copy --all oci-archive:FILE docker://IMAGE:VERSION,
#                                             or buildah/podman pull oci-archive:FILE)
#   OUTDIR/kubectl-flexvol-VERSION-linux-ARCH the kubectl plugin (flexvol-migrate, static), amd64
#                                             and arm64: kubectl flexvol migrate ...
#   OUTDIR/manifests/<overlay>[+csi-only][+loop][+provisioner][+csi[+csi-controller]][+csi-nfs][+csi-iscsi].yaml
#                                             every overlay with the combinations of the
#                                             components listed below, rendered, every flexvol
#                                             container on IMAGE@<digest> (the CSI sidecars on
#                                             kubernetes-csi's pinned images; csi-nfs's share the
#                                             placeholder nfs.example.com:/exports/k8s, to edit)
#   OUTDIR/flexvol-VERSION.tgz                the Helm chart, version VERSION, values pinned to
#                                             IMAGE@<digest>
#   the entry of VERSION of CHANGELOG.md, in OUTDIR under the same name
#   OUTDIR/SHA256SUMS                         sha256sum of every file above (sha256sum -c SHA256SUMS)
#
# IMAGE is the repository the image will be pushed to (default registry.example.com/flexvol/
# installer); the digest is the index's, which a copy with skopeo --all keeps.  Needs root
# (buildah with a private storage root under a temp directory, removed at the end), kubectl
# (kustomize) and helm (tests/kube/build-helm).
set -euo pipefail
VERSION=$1 OUT=$2 IMAGE=${3:-registry.example.com/flexvol/installer}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
die() { echo "release: $*" >&2; exit 1; }
changelog=CHANGELOG.md

[[ $VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || die "VERSION '$VERSION' is not x.y.z"
entry=$(awk -v v="$VERSION" '$0 ~ "^## \\[?"v"\\]?( |$)" {p=1; print; next} p && /^## / {exit} p {print}' "$ROOT/$changelog")
[ -n "$entry" ] || die "CHANGELOG.md has no entry '## $VERSION': write it first"
command -v buildah > /dev/null || die "buildah is not installed (ci/deps)"
helm=$("$ROOT/tests/kube/build-helm" | tail -1)

rm -rf "$OUT"; mkdir -p "$OUT/manifests"
T=$(mktemp -d /tmp/flexvol-release.XXXXXX)
B=(buildah --root "$T/root" --runroot "$T/run" --storage-driver vfs)
cleanup() { "${B[@]}" rmi --all > /dev/null 2>&1 || true; rm -rf "$T"; }
trap cleanup EXIT

# --- the image index: the same buildah commands as make check-multiarch (deploy/README.md)
ref=localhost/flexvol/installer:$VERSION
for a in amd64:image arm64:image-arm64; do
	arch=${a%%:*} ctx=$ROOT/build/${a#*:}
	grep -q "^ARG FLEXVOL_VERSION=$VERSION\$" "$ctx/Containerfile" || die "$ctx is not of version $VERSION"
	"${B[@]}" bud --platform "linux/$arch" --manifest "$ref" "$ctx" > "$T/bud-$arch.log" 2>&1 ||
		die "buildah bud $arch: $(tail -3 "$T/bud-$arch.log")"
done
archive=$OUT/flexvol-installer-$VERSION.oci.tar
"${B[@]}" manifest push --all --digestfile "$T/digest" "$ref" "oci-archive:$archive:$VERSION" > "$T/push.log" 2>&1 ||
	die "buildah manifest push: $(tail -3 "$T/push.log")"
digest=$(cat "$T/digest")
[[ $digest =~ ^sha256:[0-9a-f]{64}$ ]] || die "no digest from buildah: '$digest'"
echo "  RELEASE $archive: $IMAGE@$digest (linux/amd64, linux/arm64)"

# --- the kubectl plugin: the static flexvol-migrate of each image, named for kubectl
# (installed as kubectl-flexvol on the PATH: kubectl flexvol migrate ...)
for a in amd64:image arm64:image-arm64; do
	install -m 0755 "$ROOT/build/${a#*:}/provisioner/flexvol-migrate" "$OUT/kubectl-flexvol-$VERSION-linux-${a%%:*}"
done

# --- the manifests: every overlay x every combination of the components
site=$T/site; mkdir -p "$site"
rel=$(realpath --relative-to="$site" "$ROOT/deploy")
for o in "$ROOT"/deploy/overlays/*/kustomization.yaml; do
	o=$(basename "$(dirname "$o")")
	# csi/controller only with csi (its sidecars use the node plugin's socket); csi/nfs and
	# csi/iscsi alone, and all three CSI drivers together; CSI only (csi/only: no FlexVolume
	# installer) with each CSI driver and with all three
	for comps in "" loop provisioner "loop provisioner" csi "loop csi" "provisioner csi" "loop provisioner csi" \
		"csi csi/controller" "loop csi csi/controller" "provisioner csi csi/controller" \
		"loop provisioner csi csi/controller" csi/nfs csi/iscsi \
		"loop csi csi/controller csi/nfs csi/iscsi" \
		"csi/only csi csi/controller" "csi/only csi/nfs" "csi/only csi/iscsi" \
		"csi/only csi csi/controller csi/nfs csi/iscsi"; do
		name=$o
		{
			printf 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n'
			printf 'resources:\n  - %s\n' "$rel/overlays/$o"
			[ -z "$comps" ] || printf 'components:\n'
			for c in $comps; do name=$name+${c//\//-}; printf '  - %s\n' "$rel/$c"; done
			case " $comps " in *" csi/nfs "*)
				# deploy/csi/nfs's share: the site's choice, here a placeholder to edit
				printf 'configMapGenerator:\n  - name: flexvol-csi-nfs-share\n'
				printf '    literals: [server=nfs.example.com, path=/exports/k8s]\n'
				printf '    options:\n      annotations: {config.kubernetes.io/local-config: "true"}\n' ;;
			esac
			printf 'images:\n  - name: registry.example.com/flexvol/installer\n    newName: %s\n    digest: %s\n' \
				"$IMAGE" "$digest"
		} > "$site/kustomization.yaml"
		kubectl kustomize "$site" > "$OUT/manifests/$name.yaml" 2> "$T/kustomize.log" ||
			die "kustomize $name: $(tail -3 "$T/kustomize.log")"
	done
done

# --- the chart, its values pinned to the digest
cp -rL "$ROOT/deploy/helm/flexvol" "$T/flexvol"
sed -i -e "s|^version: .*|version: $VERSION|" -e "s|^appVersion: .*|appVersion: \"$VERSION\"|" "$T/flexvol/Chart.yaml"
sed -i -e "s|^  repository: .*|  repository: $IMAGE|" -e "s|^  tag: .*|  tag: \"$VERSION\"|" \
	-e "s|^  digest: .*|  digest: \"$digest\"|" "$T/flexvol/values.yaml"
"$helm" lint --strict "$T/flexvol" > "$T/lint.log" 2>&1 || die "helm lint: $(tail -5 "$T/lint.log")"
"$helm" package "$T/flexvol" -d "$OUT" > /dev/null || die "helm package"

printf '%s\n' "$entry" > "$OUT/$changelog"
(cd "$OUT" && find . -type f ! -name SHA256SUMS -printf '%P\n' | LC_ALL=C sort | xargs sha256sum > SHA256SUMS)
echo "  RELEASE $OUT: $(wc -l < "$OUT/SHA256SUMS") files, SHA256SUMS"
