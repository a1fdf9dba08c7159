//go:build tools

// Package tools pins the Kueue manager; see ../controlplane/tools.go for why this file exists.
package tools

import (
	_ "sigs.k8s.io/kueue/cmd/kueue"
)
