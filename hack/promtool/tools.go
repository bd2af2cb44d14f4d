//go:build tools

// Package tools pins the commands built from this module, so `go mod tidy` keeps them: promtool
// (hack/build-promtool.sh) and the Prometheus server of the local cluster's monitoring stack
// (hack/build-monitoring.sh).
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
