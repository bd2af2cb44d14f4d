//go:build tools

// Package tools pins the command hack/build-kube-router.sh builds, so `go mod tidy` keeps it.
package tools

import _ "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"
