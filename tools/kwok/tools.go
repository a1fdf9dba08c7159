//go:build tools

// Package tools pins kwok; see ../controlplane/tools.go for why this file exists.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
