#!/usr/bin/env bash
# Installs the Debian/PyPI packages the local cluster and the build need.
# Idempotent: does nothing when everything is present.
set -euo pipefail
source "$(dirname "$0")/common.sh"

DEB_PKGS=(
  golang-go rsync jq dpkg-dev            # building Kubernetes from Debian's source package
  libseccomp-dev pkg-config              # runc of the modern leg (cgo, seccomp)
  golang-github-modern-go-reflect2-dev   # reflect2 1.0.2: the vendored one crashes with Go >= 1.18
  etcd-server etcd-client                # backing etcd for the apiserver; etcd 3.4.23 image
  containerd runc containernetworking-plugins
  iptables ipset conntrack dnsmasq-base iproute2 procps psmisc   # ipset: kube-router (NETPOL)
  protobuf-compiler libprotobuf-dev      # etcd-client crate build (protoc + well-known .proto files)
  openssl curl ca-certificates
  python3-venv unzip
)

missing=()
for p in "${DEB_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -F "install ok installed" >/dev/null || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  ensure_deb_src
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # Debian starts containerd/etcd services on install; the local cluster runs its own instances.
  # Stop only the packaged service instances, through systemd or their own pidfile. Never by
  # process name: `pkill -x etcd` (and `/etc/init.d/etcd stop`, which falls back to matching the
  # name when there is no pidfile) killed the running local cluster's etcd, and would kill etcd pods.
  for svc in containerd etcd; do
    systemctl disable --now "$svc" >/dev/null 2>&1 || true
    if [ -s "/run/$svc.pid" ]; then kill "$(cat "/run/$svc.pid")" 2>/dev/null || true; rm -f "/run/$svc.pid"; fi
  done
fi

# moto (S3) and Azurite (Azure Blob) for the backup/restore tests, under $CACHE_DIR/objstore
# (a quick no-op when installed).
bash "$HACK_DIR/objstore.sh" install
