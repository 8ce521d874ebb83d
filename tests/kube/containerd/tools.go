//go:build tools

// Package tools pins the containerd commands the cluster lane builds (tests/kube/build). Never
// compiled; containerd's go.mod has exclude directives, so `go install pkg@version` refuses it.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
