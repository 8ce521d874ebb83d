//go:build tools

// Package tools pins helm (tests/kube/build-helm builds its command from this module).
package tools

import _ "helm.sh/helm/v4/cmd/helm"
