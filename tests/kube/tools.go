//go:build tools

// Package tools pins the Kubernetes commands the cluster lane builds (tests/kube/build) so that
// `go mod tidy` keeps their dependencies in go.mod/go.sum. Never compiled.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
