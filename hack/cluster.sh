#!/usr/bin/env bash
# A real one-node Kubernetes on this machine, for the operator's e2e tests. Two legs, chosen by
# K8S_VERSION (see common.sh): 1.37 (default; Kubernetes and containerd 2 built from their Go
# modules, Pod Security Admission on) and 1.20 (legacy; Debian's source package and containerd 1.6).
#
#   cluster.sh up           start (or complete) the cluster; quick no-op when it is healthy
#   cluster.sh restart [COMPONENT...]   stop those components (all by default), then `up`
#   cluster.sh down         stop everything it started and remove its state (keeps $CACHE_DIR)
#   cluster.sh status       state of each component, node readiness, kubeconfig path
#   cluster.sh kubeconfig   print the admin kubeconfig path (export KUBECONFIG=$(cluster.sh kubeconfig))
#   cluster.sh logs [COMPONENT] [LINES]   tail the logs (all components' last lines without COMPONENT)
#
# NETPOL=1 at `up`: NetworkPolicy enforcement (kube-router's firewall, component `netpol`; 1.37
# leg only; off by default); NETPOL=0 (the default) stops a running one and removes its rules.
#
# Layout: state (certs, etcd data, kubelet root, containerd root, logs) in $STATE_DIR, pids and
# sockets in $RUN_DIR, cached builds (Kubernetes binaries, image tarballs, wheels) in $CACHE_DIR.
set -euo pipefail
HACK_DIR=$(cd "$(dirname "$0")" && pwd)
REPO_DIR=$(cd "$HACK_DIR/.." && pwd)
source "$HACK_DIR/common.sh"
source "$HACK_DIR/cluster-env.sh"

# NetworkPolicy enforcement (kube-router's firewall controller, see start_netpol): NETPOL=1 at
# `up` starts it, NETPOL=0 (the default) stops a running one. Off by default: kube-router
# v2.1.0 writes the whole iptables filter table back on each sync and can restore a kube-proxy
# REJECT ("has no endpoints") that kube-proxy had just removed for a Service that got its
# endpoints, so the Service's ClusterIP refuses connections until kube-proxy's next full sync
# (seen in the suite: backup pods refused for tens of seconds). hack/test.sh turns it on only
# for the enforcement tests. The legacy leg has none: kube-router v2 watches
# discovery.k8s.io/v1 EndpointSlices (1.21+).
NETPOL=${NETPOL:-0}
case $NETPOL in 0 | 1) ;; *) die "NETPOL=$NETPOL: 1 (enforce NetworkPolicies) or 0 (the default)" ;; esac

# Start order; `down` stops them in reverse (and always stops netpol, whatever NETPOL says).
COMPONENTS=(etcd containerd dnsmasq kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy dns-sync provisioner)
if [ "$NETPOL" = 1 ]; then COMPONENTS+=(netpol); fi

# ---------------------------------------------------------------------------------------------
# processes

pidfile() { echo "$PID_DIR/$1.pid"; }

# The pid of a running component, or nothing. The command line must still mention the
# component's own state paths, so a recycled pid is never taken for ours.
component_pid() {
  local f pid
  f=$(pidfile "$1")
  [ -f "$f" ] || return 0
  # One pid per line is expected; tolerate files someone else appended to (first live one wins).
  for pid in $(grep -oE '^[0-9]+' "$f"); do
    [ -r "/proc/$pid/cmdline" ] || continue
    if tr '\0' ' ' <"/proc/$pid/cmdline" | grep -F -e "$STATE_DIR" -e "$RUN_DIR" >/dev/null; then
      echo "$pid"
      return 0
    fi
  done
  return 0
}
is_running() { [ -n "$(component_pid "$1")" ]; }

# start NAME CMD...: in its own session, immune to the caller's hangup, log in $LOG_DIR/NAME.log.
start() {
  local name=$1; shift
  if is_running "$name"; then
    log "$name already running (pid $(component_pid "$name"))"
    return 0
  fi
  log "starting $name"
  printf '\n===== %s starting: %s\n' "$(date -Is)" "$*" >>"$LOG_DIR/$name.log"
  setsid nohup "$@" >>"$LOG_DIR/$name.log" 2>&1 </dev/null &
  echo $! >"$(pidfile "$name")"
}

# start_supervised NAME CMD...: like start, but CMD is started again (after 1 s) whenever it
# exits, as the kubelet or systemd does for control-plane components on a real node:
# kube-scheduler exits on purpose when it finds its cache inconsistent (e.g. after the apiserver
# restarted under it) and expects to be restarted. TERM (stop) ends the loop and CMD.
start_supervised() {
  local name=$1; shift
  # shellcheck disable=SC2016
  start "$name" bash -c '
    child=
    trap "[ -n \"\$child\" ] && kill \$child 2>/dev/null; wait; exit 0" TERM INT
    while :; do
      "$@" & child=$!
      wait "$child"; rc=$?
      printf "\n===== %s exited (status %s); restarting in 1 s\n" "$(date -Is)" "$rc"
      sleep 1
    done' "$name" "$@"
}

fail_component() {
  local name=$1 why=$2
  printf 'error: %s %s; last lines of %s:\n' "$name" "$why" "$LOG_DIR/$name.log" >&2
  tail -n 15 "$LOG_DIR/$name.log" 2>/dev/null | sed 's/^/  | /' >&2
  exit 1
}

# wait_for NAME SECONDS DESCRIPTION CMD...: polls CMD until it succeeds; fails early when NAME died.
wait_for() {
  local name=$1 timeout=$2 what=$3; shift 3
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    is_running "$name" || fail_component "$name" "exited while waiting for $what"
    ((SECONDS < deadline)) || fail_component "$name" "did not get to '$what' within ${timeout}s"
    sleep 0.2
  done
}

# stop NAME: SIGTERM, then SIGKILL after 10 s.
stop() {
  local name=$1 pid
  pid=$(component_pid "$name")
  rm -f "$(pidfile "$name")"
  [ -n "$pid" ] || return 0
  log "stopping $name (pid $pid)"
  kill_pids TERM "$pid"
}

# A zombie counts as gone: init (here the VM's agent) may take seconds to reap our orphans.
alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  [ "$(cut -d' ' -f1 <<<"${stat##*) }")" != Z ]
}

# kill_pids SIGNAL PID...: sends SIGNAL, waits up to 10 s for them to go, then SIGKILL.
kill_pids() {
  local sig=$1; shift
  local pid deadline=$((SECONDS + 10))
  kill -s "$sig" "$@" 2>/dev/null || true
  for pid in "$@"; do
    while alive "$pid" && ((SECONDS < deadline)); do sleep 0.1; done
    if alive "$pid"; then kill -s KILL "$pid" 2>/dev/null || true; fi
  done
}

port_free() { [ -z "$(ss -Hltun "( sport = :$1 )" 2>/dev/null)" ]; }

# Ports of a component that is about to start must be free (one clear error instead of a crash loop).
need_ports() {
  local name=$1 p; shift
  is_running "$name" && return 0
  for p in "$@"; do
    port_free "$p" || die "port $p (needed by $name) is in use: $(ss -Hltunp "( sport = :$p )" | awk '{print $NF}' | sort -u | tr '\n' ' ')"
  done
}

# ---------------------------------------------------------------------------------------------
# preparation

check_tools() {
  local t missing=()
  for t in "$RUNTIME_BIN"/{containerd,containerd-shim-runc-v2,runc,ctr} etcd etcdctl dnsmasq iptables ip6tables iptables-save \
    iptables-restore conntrack ip ss openssl curl jq setsid nohup gcc unzip $([ "$NETPOL" = 0 ] || echo ipset); do
    command -v "$t" >/dev/null || missing+=("$t")
  done
  [ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/host-local ] && [ -x /usr/lib/cni/portmap ] || missing+=(containernetworking-plugins)
  ((${#missing[@]} == 0)) || die "missing dependencies: ${missing[*]} (hack/deps.sh installs them)"
}

build_devkit() {
  local cargo=${CARGO:-cargo} built=$REPO_DIR/target/debug/devkit
  command -v "$cargo" >/dev/null || cargo=/root/.cargo/bin/cargo
  mkdir -p "$(dirname "$DEVKIT")"
  # A debug build: hack/test.sh's workspace build has made it already, while a release build
  # compiled every dependency a second time (~5 min cold on 2 cores); dns-sync and provision
  # are watchers that idle. Skip cargo when the binary is newer than devkit's sources: cargo waits for the shared target
  # directory's lock while someone else builds the workspace, which made `up` take ~40 s longer.
  if [ -x "$built" ] && [ -z "$(find "$REPO_DIR/crates/devkit" -newer "$built" -type f 2>/dev/null | head -n1)" ]; then
    install -m 0755 "$built" "$DEVKIT"
    return 0
  fi
  log "building devkit"
  if (cd "$REPO_DIR" && "$cargo" build --quiet --locked -p devkit) >"$LOG_DIR/devkit-build.log" 2>&1; then
    install -m 0755 "$built" "$DEVKIT"
  elif [ -x "$built" ]; then
    # Someone else's half-edited crate can break the workspace build; an older devkit still works.
    log "warning: cargo build -p devkit failed (see $LOG_DIR/devkit-build.log); using the existing binary"
    install -m 0755 "$built" "$DEVKIT"
  else
    tail -n 20 "$LOG_DIR/devkit-build.log" >&2
    die "cargo build -p devkit failed"
  fi
}

# Sysctls this script or the components change; their original values are restored by `down`.
SYSCTLS=(net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables
  net.ipv4.conf.all.route_localnet vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

save_host_state() {
  local k f=$RUN_DIR/host-state
  [ -f "$f" ] && return 0   # a second `up` must not record the cluster's own values as the originals
  {
    for k in "${SYSCTLS[@]}"; do
      [ -e "/proc/sys/${k//.//}" ] && echo "sysctl $k $(cat "/proc/sys/${k//.//}")"
    done
    # Directories created at fixed places (kubelet: pod logs and the device-plugin socket; CNI
    # plugins: result cache; containerd shims: /run/containerd/s sockets; the controller-manager's
    # flexvolume dir): removed by `down` when they did not exist before.
    for k in /var/log/pods /var/log/containers /var/lib/kubelet /var/lib/cni "$HOSTPATH_PV_DIR" /run/containerd \
      /usr/libexec/kubernetes; do
      [ -e "$k" ] || echo "created $k"
    done
  } >"$f.tmp"
  mv "$f.tmp" "$f"
}

setup_sysctls() {
  sysctl -qw net.ipv4.ip_forward=1
  # br_netfilter: bridged pod-to-pod replies must pass conntrack, or a pod reaching a ClusterIP
  # whose endpoint sits on the same bridge sees the reply come from the pod IP and drops it.
  if [ -e /proc/sys/net/bridge/bridge-nf-call-iptables ] || modprobe br_netfilter 2>/dev/null; then
    sysctl -qw net.bridge.bridge-nf-call-iptables=1 net.bridge.bridge-nf-call-ip6tables=1
    MASQUERADE_ALL=false
  else
    # Without br_netfilter, masquerading all Service traffic sends replies back through the host.
    log "br_netfilter not available: kube-proxy masquerades all Service traffic"
    MASQUERADE_ALL=true
  fi
}

choose_snapshotter() {
  [ -f "$SNAPSHOTTER_FILE" ] && return 0
  local d=$STATE_DIR/containerd/overlay-check snap=native
  mkdir -p "$d"/{lower,upper,work,merged}
  if mount -t overlay overlay -o "lowerdir=$d/lower,upperdir=$d/upper,workdir=$d/work" "$d/merged" 2>/dev/null; then
    umount "$d/merged"
    snap=overlayfs
  else
    log "overlayfs does not mount here: containerd uses the native snapshotter"
  fi
  rm -rf "$d"
  echo "$snap" >"$SNAPSHOTTER_FILE"
}

# update_file PATH MODE < content: replaces PATH only when the content differs. Trap: kube-proxy
# exits ("content of the proxy server's configuration file was updated") on any write to its config.
update_file() {
  local path=$1 mode=$2 tmp
  tmp=$(mktemp "$path.XXXXXX")
  cat >"$tmp"
  chmod "$mode" "$tmp"
  if cmp -s "$tmp" "$path"; then rm -f "$tmp"; else mv "$tmp" "$path"; fi
}

# ---------------------------------------------------------------------------------------------
# certificates and credentials

# sign NAME CN O SAN EKU: key + certificate signed by the cluster CA. Leaves are CA:FALSE with
# keyUsage/extendedKeyUsage set: rustls/webpki rejects a CA certificate used as a leaf.
sign() {
  local name=$1 cn=$2 o=$3 san=$4 eku=$5 subj="/CN=$2"
  [ -n "$o" ] && subj="$subj/O=$o"
  openssl req -new -nodes -newkey rsa:2048 -keyout "$PKI_DIR/$name.key" -subj "$subj" \
    -out "$PKI_DIR/$name.csr" 2>/dev/null
  {
    echo "basicConstraints = critical, CA:FALSE"
    echo "keyUsage = critical, digitalSignature, keyEncipherment"
    echo "extendedKeyUsage = $eku"
    echo "subjectKeyIdentifier = hash"
    echo "authorityKeyIdentifier = keyid, issuer"
    [ -n "$san" ] && echo "subjectAltName = $san"
  } >"$PKI_DIR/$name.ext"
  openssl x509 -req -in "$PKI_DIR/$name.csr" -CA "$PKI_DIR/ca.crt" -CAkey "$PKI_DIR/ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -days 3650 -sha256 -extfile "$PKI_DIR/$name.ext" \
    -out "$PKI_DIR/$name.crt" 2>/dev/null
  rm -f "$PKI_DIR/$name.csr" "$PKI_DIR/$name.ext"
}

make_pki() {
  [ -f "$PKI_DIR/done" ] && return 0
  log "creating certificates and tokens in $PKI_DIR"
  rm -rf "$PKI_DIR"
  mkdir -p "$PKI_DIR"
  chmod 0700 "$PKI_DIR"
  cat >"$PKI_DIR/ca.cnf" <<'EOF'
[req]
distinguished_name = dn
x509_extensions = v3_ca
prompt = no
[dn]
CN = etcd-operator-dev-ca
[v3_ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign, digitalSignature
subjectKeyIdentifier = hash
EOF
  openssl req -x509 -new -nodes -newkey rsa:2048 -keyout "$PKI_DIR/ca.key" -out "$PKI_DIR/ca.crt" \
    -days 3650 -sha256 -config "$PKI_DIR/ca.cnf" 2>/dev/null
  sign apiserver kube-apiserver "" \
    "IP:$NODE_IP, IP:127.0.0.1, IP:$KUBERNETES_SVC_IP, DNS:kubernetes, DNS:kubernetes.default, DNS:kubernetes.default.svc, DNS:kubernetes.default.svc.$CLUSTER_DOMAIN, DNS:localhost, DNS:$NODE_NAME" \
    serverAuth
  # The apiserver's client identity towards kubelet (logs, exec, port-forward), as kubeadm does it.
  sign apiserver-kubelet-client kube-apiserver-kubelet-client system:masters "" clientAuth
  sign kubelet "system:node:$NODE_NAME" system:nodes "IP:$NODE_IP, IP:127.0.0.1, DNS:$NODE_NAME, DNS:localhost" serverAuth
  # Service-account token signing key pair.
  openssl genrsa -out "$PKI_DIR/sa.key" 2048 2>/dev/null
  openssl rsa -in "$PKI_DIR/sa.key" -pubout -out "$PKI_DIR/sa.pub" 2>/dev/null
  # Static tokens: admin for kubectl and the tests; each component its own identity, bound to its
  # role by Kubernetes' default RBAC (system:node via the Node authorizer, system:node-proxier,
  # system:kube-controller-manager, system:kube-scheduler).
  {
    echo "$(new_token),admin,admin,\"system:masters\""
    echo "$(new_token),system:node:$NODE_NAME,kubelet-$NODE_NAME,\"system:nodes\""
    echo "$(new_token),system:kube-proxy,kube-proxy"
    echo "$(new_token),system:kube-controller-manager,kube-controller-manager"
    echo "$(new_token),system:kube-scheduler,kube-scheduler"
  } >"$PKI_DIR/tokens.csv"
  chmod 0600 "$PKI_DIR"/*.key "$PKI_DIR/tokens.csv"
  touch "$PKI_DIR/done"
}

new_token() { openssl rand -hex 24; }
token_of() { awk -F, -v u="$1" '$2 == u { print $1 }' "$PKI_DIR/tokens.csv"; }

# kubeconfig FILE USER: token credentials, CA embedded, server at the machine's address.
write_kubeconfig() {
  local file=$1 user=$2
  update_file "$file" 0600 <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $CLUSTER_NAME
  cluster:
    server: https://$NODE_IP:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 "$PKI_DIR/ca.crt")
users:
- name: $user
  user:
    token: $(token_of "$user")
contexts:
- name: $CLUSTER_NAME
  context:
    cluster: $CLUSTER_NAME
    user: $user
current-context: $CLUSTER_NAME
EOF
}

write_kubeconfigs() {
  write_kubeconfig "$KUBECONFIG_PATH" admin
  write_kubeconfig "$STATE_DIR/kubelet.kubeconfig" "system:node:$NODE_NAME"
  write_kubeconfig "$STATE_DIR/kube-proxy.kubeconfig" system:kube-proxy
  write_kubeconfig "$STATE_DIR/kube-controller-manager.kubeconfig" system:kube-controller-manager
  write_kubeconfig "$STATE_DIR/kube-scheduler.kubeconfig" system:kube-scheduler
}

# ---------------------------------------------------------------------------------------------
# configuration files

# containerd 1.6 (legacy leg), config version 2.
containerd_config_v2() {
  cat <<EOF
# containerd for the local cluster: own root, state and socket, never the system defaults.
version = 2
root = "$CONTAINERD_ROOT"
state = "$CONTAINERD_STATE"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "$CONTAINERD_SOCK"

[ttrpc]
  address = "$CONTAINERD_SOCK.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "$STATE_DIR/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # Trap: this VM has no CAP_SYS_RESOURCE; without this every sandbox fails with
  # "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  # Pod network namespaces under \$RUN_DIR instead of /var/run/netns: nothing left in \`ip netns\`.
  netns_mounts_under_state_dir = true
  enable_selinux = false

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "$(cat "$SNAPSHOTTER_FILE")"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$RUN_DIR/runc"

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$STATE_DIR/cni/net.d"
    max_conf_num = 1
EOF
}

# containerd 2 (modern leg), config version 3: the CRI plugin is split into images and runtime.
containerd_config_v3() {
  cat <<EOF
# containerd for the local cluster: own root, state and socket, never the system defaults.
version = 3
root = "$CONTAINERD_ROOT"
state = "$CONTAINERD_STATE"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.erofs", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "$CONTAINERD_SOCK"

[ttrpc]
  address = "$CONTAINERD_SOCK.ttrpc"

# Without this, containerd 2 creates /opt/containerd (and puts its bin first on its PATH).
[plugins.'io.containerd.internal.v1.opt']
  path = "$STATE_DIR/containerd/opt"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "$(cat "$SNAPSHOTTER_FILE")"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$PAUSE_IMAGE"

[plugins.'io.containerd.cri.v1.runtime']
  # Trap: this VM has no CAP_SYS_RESOURCE; without this every sandbox fails with
  # "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  # Pod network namespaces under \$RUN_DIR instead of /var/run/netns: nothing left in \`ip netns\`.
  netns_mounts_under_state_dir = true
  enable_selinux = false
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "$RUNTIME_BIN/runc"
        Root = "$RUN_DIR/runc"
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$STATE_DIR/cni/net.d"
    max_conf_num = 1
EOF
}

write_containerd_config() {
  mkdir -p "$STATE_DIR/containerd" "$STATE_DIR/cni/net.d" "$CONTAINERD_STATE"
  if [ "$K8S_VERSION" = "$K8S_MODERN" ]; then containerd_config_v3; else containerd_config_v2; fi | update_file "$CONTAINERD_CONFIG" 0644
  update_file "$STATE_DIR/cni/net.d/10-$CNI_NETWORK.conflist" 0644 <<EOF
{
  "cniVersion": "0.4.0",
  "name": "$CNI_NETWORK",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "$POD_CIDR", "gateway": "$POD_GATEWAY" }]],
        "routes": [{ "dst": "0.0.0.0/0" }],
        "dataDir": "$STATE_DIR/cni/ipam"
      }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } }
  ]
}
EOF
}

write_kubelet_config() {
  mkdir -p "$STATE_DIR/kubelet" "$STATE_DIR/kubelet-plugins"
  update_file "$STATE_DIR/kubelet-config.yaml" 0644 <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 0.0.0.0
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: $PKI_DIR/kubelet.crt
tlsPrivateKeyFile: $PKI_DIR/kubelet.key
# The apiserver calls kubelet (logs, exec) with its client certificate; others need a token
# that passes a SubjectAccessReview.
authentication:
  anonymous: { enabled: false }
  webhook: { enabled: true }
  x509: { clientCAFile: $PKI_DIR/ca.crt }
authorization:
  mode: Webhook
cgroupDriver: cgroupfs
# No systemd, cgroup v1 without CAP_SYS_RESOURCE: no QoS hierarchy, no allocatable enforcement.
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
# Nothing may be evicted or garbage-collected: images cannot be pulled back (no registry).
evictionHard: {}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
clusterDNS: [$POD_GATEWAY]
clusterDomain: $CLUSTER_DOMAIN
resolvConf: /etc/resolv.conf
volumePluginDir: $STATE_DIR/kubelet-plugins
serializeImagePulls: false
# Faster Ready after start (status is computed every 2 s and posted when it changes).
nodeStatusUpdateFrequency: 2s
$(modern_kubelet_config)
EOF
}

# Settings only the modern kubelet knows.
modern_kubelet_config() {
  [ "$K8S_VERSION" = "$K8S_MODERN" ] || return 0
  cat <<EOF
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
# This host has cgroup v1 (/sys/fs/cgroup is a tmpfs); kubelet 1.35+ refuses to start on it
# unless told to carry on (cgroup v1 is deprecated, kept working until its removal).
failCgroupV1: false
EOF
}

write_kube_proxy_config() {
  update_file "$STATE_DIR/kube-proxy-config.yaml" 0644 <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: $STATE_DIR/kube-proxy.kubeconfig
hostnameOverride: $NODE_NAME
# Also kube-proxy's node IP: without it kube-proxy waits for the Node object to appear.
bindAddress: $NODE_IP
mode: iptables
clusterCIDR: $POD_CIDR
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
iptables:
  masqueradeAll: $MASQUERADE_ALL
  syncPeriod: 30s
  minSyncPeriod: 0s
# Leave the conntrack sysctls of the host alone (0 = do not set).
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
# Lowering oom_score_adj needs CAP_SYS_RESOURCE, which this VM does not grant.
oomScoreAdj: 0
EOF
}

# ---------------------------------------------------------------------------------------------
# components

# The pod bridge with its gateway address exists before dnsmasq starts, so dnsmasq can bind it.
setup_bridge() {
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link add "$BRIDGE" type bridge
  fi
  ip addr show dev "$BRIDGE" | grep -F "inet $POD_GATEWAY/" >/dev/null || ip addr add "$POD_GATEWAY/${POD_CIDR#*/}" dev "$BRIDGE"
  ip link set "$BRIDGE" up
}

start_etcd() {
  need_ports etcd "$ETCD_CLIENT_PORT" "$ETCD_PEER_PORT"
  mkdir -p "$STATE_DIR/etcd"
  chmod 0700 "$STATE_DIR/etcd"
  start etcd etcd --name=apiserver-etcd --data-dir="$STATE_DIR/etcd" \
    --listen-client-urls="http://127.0.0.1:$ETCD_CLIENT_PORT" --advertise-client-urls="http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster="apiserver-etcd=http://127.0.0.1:$ETCD_PEER_PORT" --initial-cluster-state=new \
    --logger=zap --log-level=warn
}

start_containerd() {
  # PATH: containerd finds its shim (containerd-shim-runc-v2) next to the binary of its leg.
  start containerd env PATH="$RUNTIME_BIN:$PATH" "$RUNTIME_BIN/containerd" --config "$CONTAINERD_CONFIG" --log-level warn
}

start_dnsmasq() {
  # Only a DNS server on the wildcard or the gateway address conflicts (a 127.0.0.53 stub does not).
  if ! is_running dnsmasq && ss -Hlun '( sport = :53 )' | awk '{ print $4 }' | grep -E "^(\*|0\.0\.0\.0|${POD_GATEWAY//./\\.}|\[::\]):53$" >/dev/null; then
    die "port $POD_GATEWAY:53 (needed by dnsmasq) is in use: $(ss -Hlunp '( sport = :53 )' | awk '{print $NF}' | sort -u | tr '\n' ' ')"
  fi
  mkdir -p "$STATE_DIR/dns"
  chmod 0755 "$STATE_DIR/dns"
  [ -f "$STATE_DIR/dns/hosts" ] || install -m 0644 /dev/null "$STATE_DIR/dns/hosts"
  # --local=/#/: unknown names get NXDOMAIN; with no upstream dnsmasq would answer REFUSED, which
  # stops the resolver's search-list walk instead of letting it try the next suffix.
  start dnsmasq dnsmasq --keep-in-foreground --log-facility=- --conf-file=/dev/null \
    --no-resolv --no-hosts --addn-hosts="$STATE_DIR/dns/hosts" --local=/#/ \
    --listen-address="$POD_GATEWAY" --bind-interfaces --pid-file="$RUN_DIR/dnsmasq.pid"
}

# A flag only the legacy (1.20) components take; the modern ones removed it.
legacy_flag() { [ "$K8S_VERSION" = "$K8S_MODERN" ] || printf '%s\n' "$@"; }
modern_flag() { [ "$K8S_VERSION" != "$K8S_MODERN" ] || printf '%s\n' "$@"; }

start_apiserver() {
  need_ports kube-apiserver "$APISERVER_PORT"
  # PodSecurity (Pod Security Admission) is on by default from 1.25: namespaces opt in by label.
  local ADMISSION_PLUGINS=NamespaceLifecycle,LimitRanger,ServiceAccount,DefaultStorageClass,DefaultTolerationSeconds,NodeRestriction,Priority,StorageObjectInUseProtection,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,ResourceQuota
  [ "$K8S_VERSION" = "$K8S_MODERN" ] && ADMISSION_PLUGINS+=,PodSecurity || ADMISSION_PLUGINS+=,PersistentVolumeClaimResize
  start kube-apiserver "$K8S_BIN/kube-apiserver" \
    --advertise-address="$NODE_IP" --bind-address=0.0.0.0 --secure-port="$APISERVER_PORT" $(legacy_flag --insecure-port=0) \
    --etcd-servers="http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --client-ca-file="$PKI_DIR/ca.crt" \
    --tls-cert-file="$PKI_DIR/apiserver.crt" --tls-private-key-file="$PKI_DIR/apiserver.key" \
    --token-auth-file="$PKI_DIR/tokens.csv" \
    --authorization-mode=Node,RBAC \
    --enable-admission-plugins="$ADMISSION_PLUGINS" \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --service-account-issuer="https://kubernetes.default.svc.$CLUSTER_DOMAIN" \
    --api-audiences="https://kubernetes.default.svc.$CLUSTER_DOMAIN" \
    --service-account-key-file="$PKI_DIR/sa.pub" --service-account-signing-key-file="$PKI_DIR/sa.key" \
    --allow-privileged=true \
    --kubelet-client-certificate="$PKI_DIR/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$PKI_DIR/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority="$PKI_DIR/ca.crt" \
    --kubelet-preferred-address-types=InternalIP \
    --profiling=false --event-ttl=1h --v=1
}

start_controller_manager() {
  need_ports kube-controller-manager 10257
  local kc=$STATE_DIR/kube-controller-manager.kubeconfig
  start_supervised kube-controller-manager "$K8S_BIN/kube-controller-manager" \
    --kubeconfig="$kc" --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
    --bind-address=127.0.0.1 $(legacy_flag --port=0) --leader-elect=false \
    --use-service-account-credentials=true \
    --service-account-private-key-file="$PKI_DIR/sa.key" --root-ca-file="$PKI_DIR/ca.crt" \
    --cluster-signing-cert-file="$PKI_DIR/ca.crt" --cluster-signing-key-file="$PKI_DIR/ca.key" \
    --flex-volume-plugin-dir="$STATE_DIR/kubelet-plugins" \
    --profiling=false --v=1
}

start_scheduler() {
  need_ports kube-scheduler 10259
  local kc=$STATE_DIR/kube-scheduler.kubeconfig
  start_supervised kube-scheduler "$K8S_BIN/kube-scheduler" \
    --kubeconfig="$kc" --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
    --bind-address=127.0.0.1 $(legacy_flag --port=0) --leader-elect=false --profiling=false --v=1
}

start_kubelet() {
  need_ports kubelet 10250 10248
  start kubelet "$K8S_BIN/kubelet" \
    --config="$STATE_DIR/kubelet-config.yaml" --kubeconfig="$STATE_DIR/kubelet.kubeconfig" \
    --root-dir="$STATE_DIR/kubelet" --cert-dir="$PKI_DIR" \
    $(legacy_flag --container-runtime=remote --container-runtime-endpoint="unix://$CONTAINERD_SOCK" \
      --pod-infra-container-image="$PAUSE_IMAGE") \
    --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" --v=1
}

start_kube_proxy() {
  need_ports kube-proxy 10249 10256
  start kube-proxy "$K8S_BIN/kube-proxy" --config="$STATE_DIR/kube-proxy-config.yaml" --v=1
}

start_dns_sync() {
  start dns-sync "$DEVKIT" dns-sync --kubeconfig "$KUBECONFIG_PATH" --hosts-file "$STATE_DIR/dns/hosts" \
    --pidfile "$RUN_DIR/dnsmasq.pid" --etc-hosts
}

# The volumes of StorageClass `standard`: a directory per claim under $PV_DIR, mode 0777. kubelet
# never applies fsGroup to hostPath volumes, so the in-tree host-path provisioner's root-owned
# 0750 directories are not writable by non-root pods, which real storage (CSI drivers apply
# fsGroup) is. See crates/devkit/src/provision.rs.
start_provisioner() {
  start provisioner "$DEVKIT" provision --kubeconfig "$KUBECONFIG_PATH" --root "$PV_DIR" --provisioner "$PV_PROVISIONER"
}

# NetworkPolicy enforcement: kube-router's firewall (network policy) controller alone, built
# from its Go module (hack/build-kube-router.sh), as a host process beside kube-proxy: per-pod
# iptables chains (KUBE-ROUTER-*, KUBE-POD-FW-*, KUBE-NWPLCY-*) in the filter table and ipsets
# (KUBE-SRC-*, KUBE-DST-*) of the allowed peers; pods on the bridge pass FORWARD through
# br_netfilter. Routing and service proxy stay off (the bridge and kube-proxy do those); no
# health or metrics port. Its identity is a client certificate (system:kube-router, accepted
# without restarting the apiserver) bound to the read-only ClusterRole below.
NETPOL_KUBECONFIG=$STATE_DIR/kube-router.kubeconfig
write_netpol_credentials() {
  [ -f "$PKI_DIR/kube-router.crt" ] || sign kube-router system:kube-router "" "" clientAuth
  chmod 0600 "$PKI_DIR/kube-router.key"
  update_file "$NETPOL_KUBECONFIG" 0600 <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $CLUSTER_NAME
  cluster:
    server: https://$NODE_IP:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 "$PKI_DIR/ca.crt")
users:
- name: system:kube-router
  user:
    client-certificate: $PKI_DIR/kube-router.crt
    client-key: $PKI_DIR/kube-router.key
contexts:
- name: $CLUSTER_NAME
  context:
    cluster: $CLUSTER_NAME
    user: system:kube-router
current-context: $CLUSTER_NAME
EOF
}

# What kube-router's informers read: it starts them all, firewall-only or not, and waits for
# each to sync.
apply_netpol_rbac() {
  kubectl_ apply -f - >/dev/null <<'EOF'
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: etcd-operator-dev:kube-router
rules:
- apiGroups: [""]
  resources: [namespaces, pods, services, endpoints, nodes]
  verbs: [get, list, watch]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: etcd-operator-dev:kube-router
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: etcd-operator-dev:kube-router}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: system:kube-router}
EOF
}

start_netpol() {
  local bin
  bin=$(bash "$HACK_DIR/build-kube-router.sh")
  write_netpol_credentials
  apply_netpol_rbac
  # Supervised: kube-router exits (klog.Fatal) on a failed iptables call, e.g. when kube-proxy
  # holds the xtables lock too long; started again, it syncs everything anew.
  start_supervised netpol "$bin" --kubeconfig="$NETPOL_KUBECONFIG" --hostname-override="$NODE_NAME" \
    --run-firewall=true --run-router=false --run-service-proxy=false --run-loadbalancer=false \
    --service-cluster-ip-range="$SERVICE_CIDR" --health-port=0 --metrics-port=0 --v=1
}

# Its first full sync made the top-level chain FORWARD jumps to.
netpol_synced() { iptables -w -t filter -S FORWARD 2>/dev/null | grep -F -- '-j KUBE-ROUTER-FORWARD' >/dev/null; }

# Removes what kube-router added and nothing else (kube-proxy's KUBE-* chains stay): the jumps
# from INPUT/FORWARD/OUTPUT, its chains, then its ipsets (unreferenced once the chains are gone).
# For `down` (clean_iptables would leave the ipsets) and `NETPOL=0 up`.
NETPOL_CHAINS='KUBE-(ROUTER|POD-FW|NWPLCY)-'
NETPOL_IPSETS='^(inet6:)?(KUBE-(SRC|DST)-|TMP-)'
clean_netpol() {
  local fam rules set
  for fam in iptables ip6tables; do
    command -v "$fam-save" >/dev/null || continue
    rules=$("$fam-save" -t filter 2>/dev/null) || continue
    grep -E "$NETPOL_CHAINS" <<<"$rules" >/dev/null || continue
    {
      echo "*filter"
      grep -E "^-A (INPUT|FORWARD|OUTPUT) .*-j $NETPOL_CHAINS" <<<"$rules" | sed 's/^-A /-D /' || true
      grep -oE "^:$NETPOL_CHAINS[^ ]*" <<<"$rules" | sed 's/^:/-F /' || true
      grep -oE "^:$NETPOL_CHAINS[^ ]*" <<<"$rules" | sed 's/^:/-X /' || true
      echo COMMIT
    } | "$fam-restore" -w --noflush 2>/dev/null || log "warning: could not remove kube-router's $fam rules"
  done
  command -v ipset >/dev/null || return 0
  for set in $(ipset list -n 2>/dev/null | grep -E "$NETPOL_IPSETS" || true); do
    ipset destroy "$set" 2>/dev/null || log "warning: could not destroy ipset $set"
  done
}

# ---------------------------------------------------------------------------------------------
# health

kubectl_() { "$KUBECTL" --kubeconfig "$KUBECONFIG_PATH" "$@"; }
etcd_healthy() { curl -sf --max-time 2 "http://127.0.0.1:$ETCD_CLIENT_PORT/health" | grep -F '"health":"true"' >/dev/null; }
containerd_healthy() { [ -S "$CONTAINERD_SOCK" ] && ctr_ version >/dev/null 2>&1; }
apiserver_ready() {
  [ "$(curl -s --max-time 2 --cacert "$PKI_DIR/ca.crt" -H "Authorization: Bearer $(token_of admin)" \
    "https://$NODE_IP:$APISERVER_PORT/readyz")" = ok ]
}
node_ready() {
  [ "$(kubectl_ get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}
dns_answers() {
  [ "$("$DEVKIT" dns-query --server "$POD_GATEWAY:53" "kubernetes.default.svc.$CLUSTER_DOMAIN" 2>/dev/null)" = "$KUBERNETES_SVC_IP" ]
}
all_running() {
  local c
  for c in "${COMPONENTS[@]}"; do is_running "$c" || return 1; done
}
# Pods can be created in namespace default (its ServiceAccount exists; on 1.20 with its token).
default_sa_ready() {
  local sa
  sa=$(kubectl_ -n default get serviceaccount default -o json 2>/dev/null) || return 1
  [ "$K8S_VERSION" = "$K8S_MODERN" ] || jq -e '.secrets[0].name' <<<"$sa" >/dev/null
}
healthy() {
  [ -f "$PKI_DIR/done" ] && all_running && apiserver_ready && node_ready && dns_answers && default_sa_ready
}

apply_defaults() {
  # A class's provisioner cannot be changed: a cluster from before `devkit provision` has
  # `standard` on kubernetes.io/host-path, which is replaced (its bound volumes keep working; the
  # in-tree plugin deletes them when their claims go while the old controller-manager runs with
  # --enable-hostpath-provisioner; after a restart without it they turn Failed instead, and
  # their directories in $HOSTPATH_PV_DIR stay until `down`).
  local current
  current=$(kubectl_ get storageclass standard -o jsonpath='{.provisioner}' --ignore-not-found)
  if [ -n "$current" ] && [ "$current" != "$PV_PROVISIONER" ]; then
    log "replacing StorageClass standard ($current -> $PV_PROVISIONER)"
    kubectl_ delete storageclass standard >/dev/null
  fi
  kubectl_ apply -f - >/dev/null <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: standard
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: $PV_PROVISIONER
reclaimPolicy: Delete
# One node: nothing to wait for (and the operator's PVC members are tested the way most clusters bind).
volumeBindingMode: Immediate
EOF
}

# ---------------------------------------------------------------------------------------------
# commands

# Refuses to touch a cluster of another version (one leg at a time on this machine).
check_running_version() {
  local running
  running=$(cat "$STATE_DIR/k8s-version" 2>/dev/null || true)
  if [ -z "$running" ] && [ -f "$PKI_DIR/done" ]; then running=$K8S_LEGACY; fi
  if [ -n "$running" ] && [ "$running" != "$K8S_VERSION" ]; then
    die "the local cluster runs Kubernetes $running; \`hack/cluster.sh down\` first to start $K8S_VERSION"
  fi
}

cmd_up() {
  need_root
  NODE_IP=$(node_ip)
  NODE_NAME=$(node_name)
  [ -n "$NODE_IP" ] || die "cannot find the machine's primary IPv4 address (no default route?)"
  check_running_version
  if [ "$NETPOL" = 1 ] && [ "$K8S_VERSION" != "$K8S_MODERN" ]; then
    die "NETPOL=1 needs the modern leg: kube-router v2 watches discovery.k8s.io/v1 (Kubernetes 1.21+)"
  fi
  if [ "$NETPOL" = 0 ] && is_running netpol; then
    stop netpol
    clean_netpol
    log "NETPOL=0: NetworkPolicy enforcement stopped"
  fi
  if healthy 2>/dev/null; then
    log "cluster already up: Kubernetes $K8S_VERSION, node $NODE_NAME Ready; KUBECONFIG=$KUBECONFIG_PATH"
    return 0
  fi
  local t0=$SECONDS
  # kubectl caches discovery per server address: a cache written by the other Kubernetes leg
  # (same address) names API versions this one does not serve (e.g. discovery.k8s.io/v1beta1).
  # (A kubectl of a running test may be writing there: a failed removal is not fatal.)
  rm -rf "${HOME:-/root}/.kube/cache/discovery" "${HOME:-/root}/.kube/cache/http" 2>/dev/null || true
  bash "$HACK_DIR/deps.sh"
  # Never two Kubernetes builds in the same source tree at once.
  flock -o "$CACHE_DIR/build-kubernetes.lock" bash "$HACK_DIR/build-kubernetes.sh"
  if [ "$K8S_VERSION" = "$K8S_MODERN" ]; then flock -o "$CACHE_DIR/build-kubernetes.lock" bash "$HACK_DIR/build-runtime.sh"; fi
  if [ "$NETPOL" = 1 ]; then bash "$HACK_DIR/build-kube-router.sh" >/dev/null; fi
  check_tools
  mkdir -p "$STATE_DIR" "$RUN_DIR" "$LOG_DIR" "$PID_DIR"
  chmod 0755 "$STATE_DIR"
  echo "$K8S_VERSION" >"$STATE_DIR/k8s-version"
  build_devkit
  bash "$HACK_DIR/images.sh" build

  # All ports first, so a conflict stops `up` before it changes anything on the host.
  need_ports etcd "$ETCD_CLIENT_PORT" "$ETCD_PEER_PORT"
  need_ports kube-apiserver "$APISERVER_PORT"
  need_ports kube-controller-manager 10257
  need_ports kube-scheduler 10259
  need_ports kubelet 10250 10248
  need_ports kube-proxy 10249 10256
  save_host_state
  setup_sysctls
  make_pki
  write_kubeconfigs
  choose_snapshotter
  write_containerd_config
  write_kubelet_config
  write_kube_proxy_config
  setup_bridge

  start_etcd
  start_containerd
  start_dnsmasq
  wait_for etcd 30 "healthy" etcd_healthy
  start_apiserver
  wait_for containerd 30 "its socket answering" containerd_healthy
  bash "$HACK_DIR/images.sh" load
  wait_for kube-apiserver 60 "ready" apiserver_ready
  apply_defaults
  start_controller_manager
  start_scheduler
  start_kubelet
  start_kube_proxy
  start_dns_sync
  start_provisioner
  wait_for kubelet 60 "node $NODE_NAME Ready" node_ready
  if [ "$NETPOL" = 1 ]; then
    start_netpol
    wait_for netpol 60 "its first NetworkPolicy sync" netpol_synced
  fi
  wait_for dns-sync 30 "DNS answers kubernetes.default.svc.$CLUSTER_DOMAIN" dns_answers
  wait_for kube-controller-manager 60 "the default ServiceAccount" default_sa_ready
  is_running dnsmasq || fail_component dnsmasq "is not running"
  is_running provisioner || fail_component provisioner "is not running"
  if [ "$K8S_VERSION" = "$K8S_MODERN" ] && [ "$(stat -fc %T /sys/fs/cgroup)" != cgroup2fs ]; then
    log "note: this host has cgroup v1, deprecated by containerd 2.2 and kubelet 1.35 (kept working; see kubelet failCgroupV1)"
  fi
  log "cluster up in $((SECONDS - t0))s: Kubernetes $K8S_VERSION, node $NODE_NAME Ready, DNS at $POD_GATEWAY"
  echo "export KUBECONFIG=$KUBECONFIG_PATH"
}

# Processes the cluster's containerd started: shims (found by our socket in their command line)
# and everything below them (pause, etcd and the other container processes).
shim_pids() {
  local p
  for p in /proc/[0-9]*; do
    tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -F -- "-address $CONTAINERD_SOCK " >/dev/null && echo "${p#/proc/}"
  done
  return 0
}
descendants() {
  local roots=" $* " changed=1 pid ppid
  local -A seen=()
  for pid in "$@"; do seen[$pid]=1; done
  while ((changed)); do
    changed=0
    while read -r pid ppid; do
      if [ -n "${seen[$ppid]:-}" ] && [ -z "${seen[$pid]:-}" ]; then seen[$pid]=1; changed=1; fi
    done < <(ps -e -o pid=,ppid=)
  done
  for pid in "${!seen[@]}"; do [[ $roots == *" $pid "* ]] || echo "$pid"; done
}
# Container processes, also those whose shim is already gone: their root mount is a snapshot in
# our containerd root. (readlink /proc/PID/root only shows "/" for them, so look at mountinfo.)
orphan_container_pids() {
  local p
  for p in /proc/[0-9]*; do
    awk '$5 == "/"' "$p/mountinfo" 2>/dev/null | grep -F "$CONTAINERD_ROOT/" >/dev/null && echo "${p#/proc/}"
  done
  return 0
}

# runc's cgroups of the killed containers (/sys/fs/cgroup/<controller>/k8s.io/<id>), deepest first.
remove_container_cgroups() {
  local d
  for d in /sys/fs/cgroup/*/k8s.io /sys/fs/cgroup/k8s.io; do
    [ -d "$d" ] || continue
    find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    [ -d "$d" ] && log "warning: cannot remove cgroup $d (processes left in it?)"
  done
  return 0
}

kill_pods() {
  local shims kids
  shims=$(shim_pids)
  kids=$( { [ -z "$shims" ] || descendants $shims; orphan_container_pids; } | sort -u)
  if [ -n "$kids" ]; then
    log "killing container processes: $(echo $kids)"
    kill_pids KILL $kids
  fi
  if [ -n "$shims" ]; then
    log "stopping containerd shims: $(echo $shims)"
    kill_pids TERM $shims
  fi
}

unmount_under() {
  local prefix m
  for prefix in "$@"; do
    # Deepest first; `umount -l` for anything still busy.
    awk -v p="$prefix" '$5 == p || index($5, p "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r |
      while read -r m; do
        m=$(printf '%b' "$m")   # mountinfo escapes spaces as \040
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "warning: cannot unmount $m"
      done
  done
}

remove_network() {
  local dev
  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    for dev in $(ip -o link show master "$BRIDGE" | awk -F': ' '{ print $2 }' | cut -d@ -f1); do
      ip link delete "$dev" 2>/dev/null || true
    done
    ip link delete "$BRIDGE" 2>/dev/null || true
  fi
  # Pod namespaces are bind-mounted under $RUN_DIR (netns_mounts_under_state_dir); an older
  # layout or a failed unmount could leave cni-* entries in /var/run/netns.
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '/^cni-/ { print $1 }'); do
    ip netns delete "$ns" 2>/dev/null || true
  done
}

# Deletes every rule that jumps to or lives in a KUBE-*/CNI-* chain, then those chains, in all tables,
# for IPv4 and IPv6 (kubelet creates its canary and firewall chains in both).
clean_iptables() {
  local fam save restore table rules
  for fam in iptables ip6tables; do
    save=$fam-save restore=$fam-restore
    command -v "$save" >/dev/null || continue
    for table in filter nat mangle raw; do
      rules=$("$save" -t "$table" 2>/dev/null) || continue
      grep -qE '(KUBE|CNI)-' <<<"$rules" || continue
      {
        echo "*$table"
        # Rules in built-in chains that jump to our chains or carry their comments.
        grep -E '^-A (INPUT|OUTPUT|FORWARD|PREROUTING|POSTROUTING) .*(KUBE|CNI)-' <<<"$rules" | sed 's/^-A /-D /' || true
        # Flush our chains first (they reference each other), then delete them.
        grep -oE '^:(KUBE|CNI)-[^ ]+' <<<"$rules" | sed 's/^:/-F /' || true
        grep -oE '^:(KUBE|CNI)-[^ ]+' <<<"$rules" | sed 's/^:/-X /' || true
        echo COMMIT
      } | "$restore" --noflush 2>/dev/null || log "warning: could not clean $fam table $table"
    done
  done
}

restore_host_state() {
  local f=$RUN_DIR/host-state kind key value
  [ -f "$f" ] || return 0
  while read -r kind key value; do
    case $kind in
      sysctl) sysctl -qw "$key=$value" 2>/dev/null || true ;;
      created) rm -rf "$key" ;;
    esac
  done <"$f"
}

cmd_down() {
  need_root
  local c i
  stop netpol   # whatever NETPOL says now: an earlier `up` may have started it
  # Reverse start order: DNS first (dns-sync removes its /etc/hosts block on SIGTERM), then the
  # node agents, so nothing restarts pods while they are being killed.
  for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do
    c=${COMPONENTS[i]}
    case $c in kube-apiserver | etcd | containerd) continue ;; esac
    stop "$c"
  done
  kill_pods
  for c in kube-apiserver etcd containerd; do stop "$c"; done
  kill_pods   # anything containerd started while it was going down
  unmount_under "$STATE_DIR" "$RUN_DIR"
  remove_container_cgroups
  remove_network
  clean_netpol
  clean_iptables
  conntrack -D -s "$POD_CIDR" >/dev/null 2>&1 || true
  conntrack -D -d "$SERVICE_CIDR" >/dev/null 2>&1 || true
  # The /etc/hosts block, in case dns-sync could not remove it itself.
  if grep -q '^# BEGIN etcd-operator-dev cluster DNS' /etc/hosts 2>/dev/null; then
    sed -i '/^# BEGIN etcd-operator-dev cluster DNS/,/^# END etcd-operator-dev cluster DNS/d' /etc/hosts
  fi
  # Files the CNI plugins keep at their fixed places for our network.
  rm -rf "/var/lib/cni/networks/$CNI_NETWORK" /var/lib/cni/results/"$CNI_NETWORK"-* 2>/dev/null || true
  # Volumes: devkit provision's, and the in-tree host-path provisioner's of a cluster started
  # before it (that directory is fixed in the in-tree plugin).
  rm -rf "$PV_DIR" "$HOSTPATH_PV_DIR"
  restore_host_state
  rm -rf "$STATE_DIR" "$RUN_DIR"
  log "cluster down"
}

component_state() {
  local pid
  pid=$(component_pid "$1")
  if [ -n "$pid" ]; then echo "running (pid $pid)"; else echo "stopped"; fi
}

cmd_status() {
  local c ready="unknown"
  NODE_IP=$(node_ip)
  NODE_NAME=$(node_name)
  for c in "${COMPONENTS[@]}"; do
    printf '%-24s %s\n' "$c" "$(component_state "$c")"
  done
  if [ -f "$PKI_DIR/done" ] && apiserver_ready 2>/dev/null; then
    ready=$(kubectl_ get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null || true)
    printf '%-24s %s\n' "apiserver" "ready (https://$NODE_IP:$APISERVER_PORT)"
    printf '%-24s %s\n' "node $NODE_NAME" "Ready=${ready:-not registered}"
  else
    printf '%-24s %s\n' "apiserver" "not ready"
  fi
  if [ -x "$DEVKIT" ] && dns_answers; then
    printf '%-24s %s\n' "cluster DNS" "answers at $POD_GATEWAY"
  else
    printf '%-24s %s\n' "cluster DNS" "not answering"
  fi
  printf '%-24s %s\n' "kubernetes" "$K8S_VERSION (K8S_VERSION=1.37|1.20 picks the leg at \`up\`)"
  printf '%-24s %s\n' "kubeconfig" "$KUBECONFIG_PATH"
  [ "$ready" = True ] && all_running
}

cmd_logs() {
  local c=${1:-} n=${2:-40}
  if [ -n "$c" ]; then
    [ -f "$LOG_DIR/$c.log" ] || die "no log $LOG_DIR/$c.log (components: ${COMPONENTS[*]})"
    tail -n "$n" "$LOG_DIR/$c.log"
    return
  fi
  for c in "${COMPONENTS[@]}"; do
    [ -f "$LOG_DIR/$c.log" ] || continue
    echo "===== $c"
    tail -n 5 "$LOG_DIR/$c.log"
  done
}

# One `up`/`down`/`restart` at a time (several sessions share this machine): the script re-runs
# itself under `flock -o`, so the lock is held by flock alone and never inherited by the daemons
# it starts (trap: an inherited lock descriptor kept the lock held for the cluster's lifetime).
# The lock file lives in the cache directory, which `down` keeps.
LOCK_FILE=$CACHE_DIR/cluster-updown.lock
locked() {
  if [ "${CLUSTER_SH_LOCKED:-}" = 1 ]; then unset CLUSTER_SH_LOCKED; return 0; fi
  mkdir -p "$CACHE_DIR"
  flock -n -o "$LOCK_FILE" true || log "waiting for another cluster.sh up/down to finish"
  CLUSTER_SH_LOCKED=1 exec flock -o -w 1800 "$LOCK_FILE" bash "$HACK_DIR/cluster.sh" "$@"
}

# restart [COMPONENT...]: stop them (all without arguments) and bring the cluster up again, e.g.
# after hack/build-kubernetes.sh replaced the binaries. Pods keep running across a restart.
cmd_restart() {
  local c names=("$@")
  ((${#names[@]})) || names=("${COMPONENTS[@]}")
  for c in "${names[@]}"; do
    [[ " ${COMPONENTS[*]} " == *" $c "* ]] || die "unknown component $c (components: ${COMPONENTS[*]})"
  done
  check_running_version
  for c in "${names[@]}"; do stop "$c"; done
  cmd_up
}

case "${1:-}" in
  up) need_root; locked "$@"; cmd_up ;;
  restart) need_root; locked "$@"; shift; cmd_restart "$@" ;;
  down) need_root; locked "$@"; cmd_down ;;
  status) cmd_status ;;
  kubeconfig) echo "$KUBECONFIG_PATH" ;;
  logs) shift; cmd_logs "$@" ;;
  *) echo "usage: $0 up|down|restart [COMPONENT...]|status|kubeconfig|logs [COMPONENT] [LINES]" >&2; exit 2 ;;
esac
