//go:build tools

// Package tools pins the command-line programs the project builds from Go modules.
// It is never compiled into anything: `go build <package>` inside this module uses
// the versions go.mod selects, which is the whole point of this file.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "helm.sh/helm/v3/cmd/helm"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
