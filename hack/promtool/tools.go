//go:build tools

// Package tools pins the command hack/build-promtool.sh builds, so `go mod tidy` keeps it.
package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
