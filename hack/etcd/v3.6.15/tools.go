//go:build tools

// Package tools pins the commands hack/images.sh builds, so `go mod tidy` keeps them.
package tools

import (
	_ "go.etcd.io/etcd/etcdctl/v3"
	_ "go.etcd.io/etcd/etcdutl/v3"
)
