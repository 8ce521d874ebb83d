//go:build tools

// Package tools pins csi-sanity (kubernetes-csi/csi-test) so that `go mod tidy` keeps its
// dependencies in go.mod/go.sum; tests/csi/build builds it from here. Never compiled.
package tools

import (
	_ "github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity"
)
