//go:build tools

// Package tools pins the command hack/build-helm.sh builds, so `go mod tidy` keeps it.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
