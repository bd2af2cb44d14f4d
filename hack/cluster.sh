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
#   cluster.sh node list|lose|restore|partition|heal|netem|fill|unfill ...   node faults (NODES>1;
#                           see cmd_node below and docs/src development pages)
#
# NODES=N at the first `up` (1 by default; 2..9 on the modern leg): N nodes, each a network
# namespace with its own containerd, kubelet and kube-proxy (layout in cluster-env.sh).
#
# NETPOL=1 at `up`: NetworkPolicy enforcement (kube-router's firewall, component `netpol`; 1.37
# leg only; off by default); NETPOL=0 (the default) stops a running one and removes its rules.
#
# MONITORING=1 at `up`: the monitoring stack (the Prometheus Operator and one Prometheus, in
# namespace monitoring; 1.37 leg only; off by default; see start_monitoring); MONITORING=0
# removes a running one; unset leaves it as it is (an `up` for another reason never deletes it).
#
# CERT_MANAGER=1 at `up`: cert-manager's certificate controllers (SelfSigned and CA issuers, in
# namespace cert-manager; 1.37 leg only; off by default; see start_cert_manager); CERT_MANAGER=0
# removes it; unset leaves it as it is, as MONITORING.
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
# The monitoring stack (start_monitoring): pods and API objects, no component of this script.
MONITORING=${MONITORING:-}
case $MONITORING in 0 | 1 | "") ;; *) die "MONITORING=$MONITORING: 1 (the Prometheus Operator and a Prometheus), 0 (remove it) or unset (leave it as it is)" ;; esac
# cert-manager (start_cert_manager): likewise pods and API objects.
CERT_MANAGER=${CERT_MANAGER:-}
case $CERT_MANAGER in 0 | 1 | "") ;; *) die "CERT_MANAGER=$CERT_MANAGER: 1 (cert-manager's certificate controllers), 0 (remove them) or unset (leave them as they are)" ;; esac

# Start order; `down` stops them in reverse (and always stops netpol, whatever NETPOL says).
COMPONENTS=(etcd containerd dnsmasq kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy dns-sync provisioner)
if [ "$NETPOL" = 1 ]; then COMPONENTS+=(netpol); fi
# Several nodes (NODES=N, see cluster-env.sh): the control plane and the host's helpers, then
# each node's agents, named NODE.COMPONENT (node-1.kubelet: pid file, log, `restart` argument).
NODE_COMPONENTS=(containerd kubelet kube-proxy)
if [ "$NETPOL" = 1 ]; then NODE_COMPONENTS+=(netpol); fi
if multi_node; then
  COMPONENTS=(etcd dnsmasq kube-apiserver kube-controller-manager kube-scheduler dns-sync provisioner)
  for n in $(node_names); do for c in "${NODE_COMPONENTS[@]}"; do COMPONENTS+=("$n.$c"); done; done
fi

# ---------------------------------------------------------------------------------------------
# processes

# COMPONENT_PREFIX (node_scope: "node-1.") names a node's components; SCOPE_NETNS (node_scope) is
# the network namespace its processes start in.
pidfile() { echo "$PID_DIR/${COMPONENT_PREFIX:-}$1.pid"; }

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
    log "${COMPONENT_PREFIX:-}$name already running (pid $(component_pid "$name"))"
    return 0
  fi
  local full=${COMPONENT_PREFIX:-}$name ns=()
  # nsenter --net only: the node's processes keep the host's mount namespace (see cluster-env.sh).
  [ -z "${SCOPE_NETNS:-}" ] || ns=(nsenter --net="$SCOPE_NETNS" --)
  log "starting $full"
  printf '\n===== %s starting: %s\n' "$(date -Is)" "$*" >>"$LOG_DIR/$full.log"
  setsid nohup "${ns[@]}" "$@" >>"$LOG_DIR/$full.log" 2>&1 </dev/null &
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
  local name=${COMPONENT_PREFIX:-}$1 why=$2
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
  log "stopping ${COMPONENT_PREFIX:-}$name (pid $pid)"
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
  [ -z "${SCOPE_NETNS:-}" ] || return 0   # a node's ports are its network namespace's own
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
  if [ -x "$built" ] && [ -z "$(find "$REPO_DIR/crates/devkit" -newer "$built" -type f 2>/dev/null | sed -n 1p)" ]; then
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
  # Several nodes: each kubelet serves with its own certificate (the apiserver dials its node IP).
  local n
  for n in $(multi_node && node_names); do
    node_env "$n"
    sign "kubelet-$n" "system:node:$n" system:nodes "IP:$N_IP, IP:127.0.0.1, DNS:$n, DNS:localhost" serverAuth
  done
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
    for n in $(multi_node && node_names); do echo "$(new_token),system:node:$n,kubelet-$n,\"system:nodes\""; done
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
    server: https://${APISERVER_IP:-$NODE_IP}:$APISERVER_PORT
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

# NRI listens on a fixed host path (/var/run/nri/nri.sock) that the containerd of every node
# would share (the second one to start exits: "address already in use"); nothing here uses it.
[plugins.'io.containerd.nri.v1.nri']
  disable = true

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
      "ipMasq": ${CNI_IPMASQ:-true},
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
tlsCertFile: $PKI_DIR/${KUBELET_CERT:-kubelet}.crt
tlsPrivateKeyFile: $PKI_DIR/${KUBELET_CERT:-kubelet}.key
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
clusterDNS: [$DNS_IP]
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
  # A node of several: kubelets sharing /var/log/pods remove each other's pods' log directories.
  [ -z "${SCOPE_NETNS:-}" ] || echo "podLogsDirectory: $STATE_DIR/pod-logs"
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
clusterCIDR: ${CLUSTER_CIDR:-$POD_CIDR}
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
    --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" ${NODE_LABELS:+--node-labels="$NODE_LABELS"} --v=1
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
  # Several nodes: a volume lives on the node the scheduler picked, under $PV_DIR/<node>/.
  start provisioner "$DEVKIT" provision --kubeconfig "$KUBECONFIG_PATH" --root "$PV_DIR" --provisioner "$PV_PROVISIONER" \
    $(multi_node && echo --per-node)
}

# NetworkPolicy enforcement: kube-router's firewall (network policy) controller alone, built
# from its Go module (hack/build-kube-router.sh), as a host process beside kube-proxy: per-pod
# iptables chains (KUBE-ROUTER-*, KUBE-POD-FW-*, KUBE-NWPLCY-*) in the filter table and ipsets
# (KUBE-SRC-*, KUBE-DST-*) of the allowed peers; pods on the bridge pass FORWARD through
# br_netfilter. Routing and service proxy stay off (the bridge and kube-proxy do those); no
# health or metrics port. Its identity is a client certificate (system:kube-router, accepted
# without restarting the apiserver) bound to the read-only ClusterRole below.
# (In a node's scope the kubeconfig is the node's own copy: its path in kube-router's command line
# is how component_pid knows the process for that node's.)
write_netpol_credentials() {
  [ -f "$PKI_DIR/kube-router.crt" ] || sign kube-router system:kube-router "" "" clientAuth
  chmod 0600 "$PKI_DIR/kube-router.key"
  update_file "$STATE_DIR/kube-router.kubeconfig" 0600 <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $CLUSTER_NAME
  cluster:
    server: https://${APISERVER_IP:-$NODE_IP}:$APISERVER_PORT
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
  start_supervised netpol "$bin" --kubeconfig="$STATE_DIR/kube-router.kubeconfig" --hostname-override="$NODE_NAME" \
    --run-firewall=true --run-router=false --run-service-proxy=false --run-loadbalancer=false \
    --service-cluster-ip-range="$SERVICE_CIDR" --health-port=0 --metrics-port=0 --v=1
}

# Its first full sync made the top-level chain FORWARD jumps to.
netpol_synced() { nodex iptables -w -t filter -S FORWARD 2>/dev/null | grep -F -- '-j KUBE-ROUTER-FORWARD' >/dev/null; }

# Removes what kube-router added and nothing else (kube-proxy's KUBE-* chains stay): the jumps
# from INPUT/FORWARD/OUTPUT, its chains, then its ipsets (unreferenced once the chains are gone).
# For `down` (clean_iptables would leave the ipsets) and `NETPOL=0 up`.
NETPOL_CHAINS='KUBE-(ROUTER|POD-FW|NWPLCY)-'
NETPOL_IPSETS='^(inet6:)?(KUBE-(SRC|DST)-|TMP-)'
clean_netpol() {
  local fam rules set
  for fam in iptables ip6tables; do
    command -v "$fam-save" >/dev/null || continue
    rules=$(nodex "$fam-save" -t filter 2>/dev/null) || continue
    grep -E "$NETPOL_CHAINS" <<<"$rules" >/dev/null || continue
    {
      echo "*filter"
      grep -E "^-A (INPUT|FORWARD|OUTPUT) .*-j $NETPOL_CHAINS" <<<"$rules" | sed 's/^-A /-D /' || true
      grep -oE "^:$NETPOL_CHAINS[^ ]*" <<<"$rules" | sed 's/^:/-F /' || true
      grep -oE "^:$NETPOL_CHAINS[^ ]*" <<<"$rules" | sed 's/^:/-X /' || true
      echo COMMIT
    } | nodex "$fam-restore" -w --noflush 2>/dev/null || log "warning: could not remove kube-router's $fam rules"
  done
  command -v ipset >/dev/null || return 0
  for set in $(nodex ipset list -n 2>/dev/null | grep -E "$NETPOL_IPSETS" || true); do
    nodex ipset destroy "$set" 2>/dev/null || log "warning: could not destroy ipset $set"
  done
}

# ---------------------------------------------------------------------------------------------
# the monitoring stack (MONITORING=1)

# A real Prometheus Operator and one Prometheus, installed as their users install them, for the
# e2e tests of the operator's PodMonitors and PrometheusRule (crates/e2e/tests/prometheus_stack.rs),
# which create those objects in their namespaces as a user does and query Prometheus over its
# HTTP API. Binaries from the projects' Go modules, images under upstream's names, both by
# `hack/images.sh monitoring` (hack/build-monitoring.sh). In namespace `monitoring`:
# - the Prometheus Operator from the bundle.yaml of its Go module (CRDs, RBAC, Deployment,
#   Service: the file its installation docs create), moved out of `default` the way those docs
#   move it (kustomize's `namespace:` added to upstream's kustomization.yaml, by kubectl's own
#   kustomize), applied server-side (its CRDs are too big for the annotation of a client-side
#   apply);
# - one Prometheus `e2e` selecting every ServiceMonitor, PodMonitor and PrometheusRule of every
#   namespace, scraping and evaluating every 5 s (a monitor's own interval wins), no persistent
#   storage (an emptyDir), running as ServiceAccount prometheus-e2e with the ClusterRole the
#   operator's docs give Prometheus (example/rbac/prometheus), a ServiceMonitor of itself, and
#   the ClusterIP Service prometheus-e2e (port 9090 `web`, as the docs expose it), which the
#   host reaches through kube-proxy: http://<its ClusterIP>:9090 (`cluster.sh status` prints it,
#   and $STATE_DIR/monitoring/prometheus-url holds it).
# Not handled: NetworkPolicies. Under NETPOL=1 a pod whose policy admits no traffic from
# namespace `monitoring` cannot be scraped.
# MONITORING=0 at `up` removes a stack an earlier `up` installed: the CRDs with every
# ServiceMonitor, PodMonitor and PrometheusRule of every namespace. That is why only an explicit
# 0 removes it; unset leaves the stack as it is.
MONITORING_NS=monitoring
MONITORING_DIR=$STATE_DIR/monitoring
PROMETHEUS_NAME=e2e
PROMETHEUS_SERVICE=prometheus-e2e

# monitoring_manifests PROMETHEUS_IMAGE: what goes with the operator's bundle.
monitoring_manifests() {
  local image=$1
  cat <<EOF
apiVersion: v1
kind: ServiceAccount
metadata:
  name: $PROMETHEUS_SERVICE
  namespace: $MONITORING_NS
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: $PROMETHEUS_SERVICE
rules:
- apiGroups: [""]
  resources: [nodes, nodes/metrics, services, endpoints, pods]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch]
- apiGroups: [networking.k8s.io]
  resources: [ingresses]
  verbs: [get, list, watch]
- nonResourceURLs: [/metrics]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: $PROMETHEUS_SERVICE
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: $PROMETHEUS_SERVICE}
subjects:
- {kind: ServiceAccount, name: $PROMETHEUS_SERVICE, namespace: $MONITORING_NS}
---
apiVersion: monitoring.coreos.com/v1
kind: Prometheus
metadata:
  name: $PROMETHEUS_NAME
  namespace: $MONITORING_NS
spec:
  image: $image
  version: ${image##*:}
  replicas: 1
  serviceAccountName: $PROMETHEUS_SERVICE
  scrapeInterval: 5s
  evaluationInterval: 5s
  # Empty selectors: every object of its kind; empty namespace selectors: in every namespace.
  serviceMonitorSelector: {}
  serviceMonitorNamespaceSelector: {}
  podMonitorSelector: {}
  podMonitorNamespaceSelector: {}
  ruleSelector: {}
  ruleNamespaceSelector: {}
---
apiVersion: v1
kind: Service
metadata:
  name: $PROMETHEUS_SERVICE
  namespace: $MONITORING_NS
  labels: {app.kubernetes.io/name: $PROMETHEUS_SERVICE}
spec:
  type: ClusterIP
  ports:
  - {name: web, port: 9090, protocol: TCP, targetPort: web}
  selector: {prometheus: $PROMETHEUS_NAME}
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: $PROMETHEUS_SERVICE
  namespace: $MONITORING_NS
spec:
  selector:
    matchLabels: {app.kubernetes.io/name: $PROMETHEUS_SERVICE}
  endpoints:
  - port: web
EOF
}

prometheus_url() {
  local ip
  ip=$(kubectl_ -n "$MONITORING_NS" get service "$PROMETHEUS_SERVICE" -o jsonpath='{.spec.clusterIP}' 2>/dev/null) &&
    [ -n "$ip" ] && echo "http://$ip:9090"
}
prometheus_ready() {
  local url
  url=$(prometheus_url) && curl -sf --max-time 2 -o /dev/null "$url/-/ready"
}
operator_available() {
  [ "$(kubectl_ -n "$MONITORING_NS" get deployment prometheus-operator \
    -o jsonpath='{.status.conditions[?(@.type=="Available")].status}' 2>/dev/null)" = True ]
}
prometheus_pod_ready() {
  [ "$(kubectl_ -n "$MONITORING_NS" get pod "prometheus-$PROMETHEUS_NAME-0" \
    -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

# monitoring_wait SECONDS DESCRIPTION CMD...: polls CMD; at the deadline says what the stack's
# pods and the operator say, and fails.
monitoring_wait() {
  local timeout=$1 what=$2; shift 2
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      printf 'error: the monitoring stack did not get to "%s" within %ss; its pods and the operator'"'"'s last lines:\n' "$what" "$timeout" >&2
      kubectl_ -n "$MONITORING_NS" get pods -o wide 2>&1 | sed 's/^/  | /' >&2 || true
      kubectl_ -n "$MONITORING_NS" logs deployment/prometheus-operator --tail=15 2>&1 | sed 's/^/  | /' >&2 || true
      exit 1
    fi
    sleep 1
  done
}

start_monitoring() {
  local lines bundle prometheus_image operator_image reloader_image recipe url t0=$SECONDS
  lines=$(bash "$HACK_DIR/build-monitoring.sh") || die "building the monitoring stack failed (hack/build-monitoring.sh)"
  bundle=$(bash "$HACK_DIR/build-monitoring.sh" bundle)
  prometheus_image=$(awk '$1 == "prometheus" { print $2 }' <<<"$lines")
  operator_image=$(awk '$1 == "prometheus-operator" { print $2 }' <<<"$lines")
  reloader_image=$(awk '$1 == "prometheus-config-reloader" { print $2 }' <<<"$lines")
  # What is installed: the bundle and the manifests above (an `up` with other ones applies them).
  recipe="bundle $(sha256sum "$bundle" | cut -c1-16) manifests $(monitoring_manifests "$prometheus_image" | sha256sum | cut -c1-16)"
  if [ "$(cat "$MONITORING_DIR/installed" 2>/dev/null)" = "$recipe" ] && prometheus_ready; then
    log "monitoring already up: Prometheus at $(prometheus_url) ($MONITORING_NS/$PROMETHEUS_SERVICE)"
    return 0
  fi
  # The bundle runs the images built here, by their names: the operator's, and the reloader's,
  # which the operator adds to each Prometheus pod.
  grep -F -- "image: $operator_image" "$bundle" >/dev/null ||
    die "$bundle does not run $operator_image (the image hack/images.sh monitoring builds)"
  grep -F -- "--prometheus-config-reloader=$reloader_image" "$bundle" >/dev/null ||
    die "$bundle does not name $reloader_image as its config reloader (the image hack/images.sh monitoring builds)"
  bash "$HACK_DIR/images.sh" monitoring
  log "installing the monitoring stack: the Prometheus Operator ${operator_image##*:}, Prometheus ${prometheus_image##*:}"
  rm -f "$MONITORING_DIR/installed"
  mkdir -p "$MONITORING_DIR/bundle"
  install -m 0644 "$bundle" "$(dirname "$bundle")/kustomization.yaml" "$MONITORING_DIR/bundle/"
  echo "namespace: $MONITORING_NS" >>"$MONITORING_DIR/bundle/kustomization.yaml"
  kubectl_ create namespace "$MONITORING_NS" --dry-run=client -o yaml | kubectl_ apply -f - >/dev/null
  kubectl_ apply --server-side --force-conflicts -k "$MONITORING_DIR/bundle" >/dev/null
  # (kubectl wait's watch prints "context canceled" when it ends: its output only on a failure.)
  local out
  out=$(kubectl_ wait --for=condition=Established --timeout=60s crd/prometheuses.monitoring.coreos.com \
    crd/servicemonitors.monitoring.coreos.com crd/podmonitors.monitoring.coreos.com crd/prometheusrules.monitoring.coreos.com 2>&1) ||
    die "the Prometheus Operator's CRDs are not established: $out"
  monitoring_manifests "$prometheus_image" | kubectl_ apply --server-side --force-conflicts -f - >/dev/null
  monitoring_wait 120 "the Prometheus Operator available" operator_available
  monitoring_wait 180 "pod prometheus-$PROMETHEUS_NAME-0 Ready" prometheus_pod_ready
  # Ready in the API is not yet routed: kube-proxy writes the Service's rules at its next sync.
  monitoring_wait 60 "Prometheus answering /-/ready at its Service's ClusterIP from this host" prometheus_ready
  url=$(prometheus_url)
  echo "$url" >"$MONITORING_DIR/prometheus-url"
  echo "$recipe" >"$MONITORING_DIR/installed"
  log "monitoring up in $((SECONDS - t0))s: Prometheus at $url ($MONITORING_NS/$PROMETHEUS_SERVICE)"
}

# Removes what start_monitoring installed (and what the operator made outside its namespace:
# the kubelet Service and Endpoints of its --kubelet-service). The Prometheus first, while its
# operator runs: the operator holds it with a finalizer when a feature gate says so.
stop_monitoring() {
  log "MONITORING=0: removing the monitoring stack"
  if ! kubectl_ -n "$MONITORING_NS" delete prometheus "$PROMETHEUS_NAME" --ignore-not-found --timeout=60s >/dev/null 2>&1; then
    kubectl_ -n "$MONITORING_NS" patch prometheus "$PROMETHEUS_NAME" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
  fi
  local ok=1
  if [ -f "$MONITORING_DIR/bundle/kustomization.yaml" ]; then
    kubectl_ delete -k "$MONITORING_DIR/bundle" --ignore-not-found --timeout=120s >/dev/null || {
      log "warning: could not delete all of the Prometheus Operator's bundle"
      ok=0
    }
  fi
  kubectl_ delete clusterrolebinding/"$PROMETHEUS_SERVICE" clusterrole/"$PROMETHEUS_SERVICE" --ignore-not-found >/dev/null || true
  kubectl_ delete namespace "$MONITORING_NS" --ignore-not-found --timeout=120s >/dev/null || {
    log "warning: namespace $MONITORING_NS is not gone yet"
    ok=0
  }
  # (2>/dev/null: kubectl warns that v1 Endpoints are deprecated.)
  kubectl_ -n kube-system delete service,endpoints,endpointslices.discovery.k8s.io -l app.kubernetes.io/managed-by=prometheus-operator \
    --ignore-not-found >/dev/null 2>&1 || true
  if [ "$ok" = 0 ]; then
    # Kept: the bundle is what the next MONITORING=0 deletes.
    log "MONITORING=0: not all of the monitoring stack is removed; MONITORING=0 hack/cluster.sh up tries again"
    return 1
  fi
  rm -rf "$MONITORING_DIR"
  log "MONITORING=0: the monitoring stack is removed"
}

# At the end of `up`: installs the stack (MONITORING=1), removes one an earlier `up` installed
# (MONITORING=0) or leaves it (unset). The cluster is up either way: a stack that fails to come
# up or go away is a warning, not a failed `up` (tests/prometheus_stack.rs says what is missing).
converge_monitoring() {
  case $MONITORING in
    1) (start_monitoring) || log "warning: the monitoring stack did not come up (above)" ;;
    0) if [ -d "$MONITORING_DIR" ]; then (stop_monitoring) || log "warning: the monitoring stack is not all removed (above)"; fi ;;
  esac
}

# ---------------------------------------------------------------------------------------------
# cert-manager (CERT_MANAGER=1)

# cert-manager's certificate controllers, for the operator's `certManager` TLS source (issue 31),
# whose tests create Issuers and Certificates in their namespaces as a user does. The binary is
# hack/cert-manager/main.go over the published Go module (SelfSigned and CA issuers, the approver
# and the certificates-* controllers; no webhook, no ACME, no leader election: see its comment),
# packed by `hack/images.sh cert-manager` as quay.io/etcd-operator-rs/cert-manager-controller
# (not upstream's name: it takes other flags). Installed:
# - the CRDs of cert-manager.io (Certificates, CertificateRequests, Issuers, ClusterIssuers) from
#   the module's deploy/crds, applied server-side (Issuers' is over the 256 KiB of a client-side
#   apply's annotation). Those files are plain YAML; their specs are those of the Helm chart's
#   templates (what a release's cert-manager.yaml holds; compared for v1.21.2), without the
#   chart's labels. The acme.cert-manager.io CRDs are left out: nothing here serves Orders or
#   Challenges;
# - in namespace cert-manager (Pod Security `restricted` enforced): the ServiceAccount
#   cert-manager, bound to the ClusterRole cert-manager-controller (the rules of upstream's
#   controller ClusterRoles that these controllers use: cert-manager.io's kinds, Secrets, Events,
#   approving for cert-manager.io signers), and the one-replica Deployment cert-manager, watching
#   every namespace (ClusterIssuers' Secrets in cert-manager);
# - the ClusterIssuer e2e-selfsigned (SelfSigned): `up` waits until the controllers made it Ready,
#   which proves them running with their informers synced; tests may use it.
# CERT_MANAGER=0 at `up` removes what an earlier `up` installed: the CRDs with every Certificate,
# CertificateRequest, Issuer and ClusterIssuer of every namespace (their Secrets stay). That is why
# only an explicit 0 removes it; unset leaves it as it is.
CERT_MANAGER_NS=cert-manager
CERT_MANAGER_DIR=$STATE_DIR/cert-manager
CERT_MANAGER_CRDS=(certificates certificaterequests issuers clusterissuers)
CERT_MANAGER_ISSUER=e2e-selfsigned

# cert_manager_manifests IMAGE CONFIG_DIGEST: everything but the CRDs and the ClusterIssuer. The
# image's digest in the pod template's annotations: a rebuilt image (same name) rolls the pods.
cert_manager_manifests() {
  local image=$1 digest=$2
  cat <<EOM
apiVersion: v1
kind: Namespace
metadata:
  name: $CERT_MANAGER_NS
  labels:
    pod-security.kubernetes.io/enforce: restricted
    pod-security.kubernetes.io/warn: restricted
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: cert-manager
  namespace: $CERT_MANAGER_NS
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: cert-manager-controller
rules:
- apiGroups: [cert-manager.io]
  resources: [certificates, certificaterequests, issuers, clusterissuers]
  verbs: [get, list, watch]
- apiGroups: [cert-manager.io]
  resources: [certificates, certificates/status, certificaterequests/status, issuers/status, clusterissuers/status]
  verbs: [update, patch]
# The request manager creates CertificateRequests, the revision manager deletes old ones.
- apiGroups: [cert-manager.io]
  resources: [certificaterequests]
  verbs: [create, update, patch, delete]
# For clusters with the OwnerReferencesPermissionEnforcement admission plugin (as upstream).
- apiGroups: [cert-manager.io]
  resources: [certificates/finalizers, certificaterequests/finalizers]
  verbs: [update]
# The approver approves CertificateRequests of cert-manager.io's issuers (upstream's webhook checks
# this permission; none runs here, the rule is kept as upstream has it).
- apiGroups: [cert-manager.io]
  resources: [signers]
  verbs: [approve]
# Keys (the key manager's next-private-key Secrets), certificates, CA Secrets of CA issuers.
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: cert-manager-controller
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cert-manager-controller}
subjects:
- {kind: ServiceAccount, name: cert-manager, namespace: $CERT_MANAGER_NS}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: cert-manager
  namespace: $CERT_MANAGER_NS
  labels: {app.kubernetes.io/name: cert-manager, app.kubernetes.io/component: controller}
spec:
  replicas: 1
  # One at a time: it runs without leader election.
  strategy: {type: Recreate}
  selector:
    matchLabels: {app.kubernetes.io/name: cert-manager, app.kubernetes.io/component: controller}
  template:
    metadata:
      labels: {app.kubernetes.io/name: cert-manager, app.kubernetes.io/component: controller}
      annotations: {etcd-operator.dev/image-config: "$digest"}
    spec:
      serviceAccountName: cert-manager
      securityContext:
        runAsNonRoot: true
        seccompProfile: {type: RuntimeDefault}
      containers:
      - name: cert-manager-controller
        image: $image
        # Imported into every node's containerd by hack/images.sh; there is no registry.
        imagePullPolicy: Never
        args: [--cluster-resource-namespace=$CERT_MANAGER_NS, -v=2]
        resources:
          requests: {cpu: 10m, memory: 32Mi}
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities: {drop: [ALL]}
EOM
}

cert_manager_issuer() {
  cat <<EOM
apiVersion: cert-manager.io/v1
kind: ClusterIssuer
metadata:
  name: $CERT_MANAGER_ISSUER
spec:
  selfSigned: {}
EOM
}

cert_manager_available() {
  [ "$(kubectl_ -n "$CERT_MANAGER_NS" get deployment cert-manager \
    -o jsonpath='{.status.conditions[?(@.type=="Available")].status}' 2>/dev/null)" = True ]
}
cert_manager_issuer_ready() {
  [ "$(kubectl_ get clusterissuer "$CERT_MANAGER_ISSUER" \
    -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

# cert_manager_fail WHAT: says what the namespace's pods, its last events and the controllers'
# last lines say, and fails.
cert_manager_fail() {
  printf 'error: cert-manager did not get to %s; its pods, last events and the controllers'"'"' last lines:\n' "$1" >&2
  kubectl_ -n "$CERT_MANAGER_NS" get pods -o wide 2>&1 | sed 's/^/  | /' >&2 || true
  kubectl_ -n "$CERT_MANAGER_NS" get events --sort-by=.lastTimestamp 2>&1 | tail -n 8 | sed 's/^/  | /' >&2 || true
  kubectl_ -n "$CERT_MANAGER_NS" logs deployment/cert-manager --tail=15 2>&1 | sed 's/^/  | /' >&2 || true
  exit 1
}
# cert_manager_wait SECONDS DESCRIPTION CMD...: polls CMD; cert_manager_fail at the deadline.
cert_manager_wait() {
  local timeout=$1 what=$2; shift 2
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || cert_manager_fail "\"$what\" within ${timeout}s"
    sleep 1
  done
}

# Runs in `( ... ) ||` (converge_cert_manager), where set -e does not apply: every step checked.
start_cert_manager() {
  local line image digest crds f files=() recipe out t0=$SECONDS
  # The image, built (cached) but not imported: enough to tell whether the installed one is it.
  line=$(bash "$HACK_DIR/images.sh" cert-manager build) || die "building cert-manager failed (hack/build-cert-manager.sh, hack/images.sh cert-manager)"
  read -r image digest <<<"$line"
  crds=$(bash "$HACK_DIR/build-cert-manager.sh" crds) || die "cert-manager's CRDs not found (hack/build-cert-manager.sh crds)"
  for f in "${CERT_MANAGER_CRDS[@]}"; do
    f=$crds/cert-manager.io_$f.yaml
    [ -f "$f" ] || die "$f not found"
    # Plain YAML is what this applies; a templated file (a moved chart template) would not be.
    if grep -F '{{' "$f" >/dev/null; then die "$f is a template now, not plain YAML: render it before applying"; fi
    files+=("$f")
  done
  # What is installed: the CRDs, the manifests (with the image's digest) and the ClusterIssuer.
  recipe="crds $(cat "${files[@]}" | sha256sum | cut -c1-16) manifests $({ cert_manager_manifests "$image" "$digest"; cert_manager_issuer; } | sha256sum | cut -c1-16)"
  if [ "$(cat "$CERT_MANAGER_DIR/installed" 2>/dev/null)" = "$recipe" ] && cert_manager_available && cert_manager_issuer_ready; then
    log "cert-manager already up (deployment $CERT_MANAGER_NS/cert-manager, ClusterIssuer $CERT_MANAGER_ISSUER Ready)"
    return 0
  fi
  bash "$HACK_DIR/images.sh" cert-manager >/dev/null || die "importing cert-manager's image failed (hack/images.sh cert-manager)"
  log "installing cert-manager ${image##*:} (its certificate controllers, SelfSigned and CA issuers)"
  rm -f "$CERT_MANAGER_DIR/installed"
  # The directory before the first object: CERT_MANAGER=0 removes whatever this got to install.
  mkdir -p "$CERT_MANAGER_DIR" || die "cannot make $CERT_MANAGER_DIR"
  local args=() names=()
  for f in "${files[@]}"; do args+=(-f "$f"); done
  for f in "${CERT_MANAGER_CRDS[@]}"; do names+=("crd/$f.cert-manager.io"); done
  kubectl_ apply --server-side --force-conflicts "${args[@]}" >/dev/null || die "applying cert-manager's CRDs failed"
  # (kubectl wait's watch prints "context canceled" when it ends: its output only on a failure.)
  out=$(kubectl_ wait --for=condition=Established --timeout=60s "${names[@]}" 2>&1) ||
    die "cert-manager's CRDs are not established: $out"
  cert_manager_manifests "$image" "$digest" | kubectl_ apply --server-side --force-conflicts -f - >/dev/null ||
    die "applying cert-manager's namespace, RBAC and Deployment failed"
  # The pods of this template (not a previous one's) available.
  out=$(kubectl_ -n "$CERT_MANAGER_NS" rollout status deployment/cert-manager --timeout=120s 2>&1) ||
    cert_manager_fail "deployment cert-manager rolled out within 120s ($(tail -n1 <<<"$out"))"
  # A fresh ClusterIssuer: its Ready is then this Deployment's doing, not an earlier one's.
  kubectl_ delete clusterissuer "$CERT_MANAGER_ISSUER" --ignore-not-found --timeout=30s >/dev/null ||
    die "deleting the previous ClusterIssuer $CERT_MANAGER_ISSUER failed"
  cert_manager_issuer | kubectl_ apply --server-side --force-conflicts -f - >/dev/null ||
    die "creating the ClusterIssuer $CERT_MANAGER_ISSUER failed"
  cert_manager_wait 60 "ClusterIssuer $CERT_MANAGER_ISSUER Ready" cert_manager_issuer_ready
  echo "$recipe" >"$CERT_MANAGER_DIR/installed"
  log "cert-manager up in $((SECONDS - t0))s: deployment $CERT_MANAGER_NS/cert-manager, ClusterIssuer $CERT_MANAGER_ISSUER Ready"
}

# Removes what start_cert_manager installed: the ClusterIssuer while the controllers run (nothing
# holds it, but it goes cleanly), then the CRDs (every cert-manager.io object of the cluster goes
# with them; Secrets they made stay), the cluster RBAC and the namespace.
stop_cert_manager() {
  log "CERT_MANAGER=0: removing cert-manager"
  local ok=1 crd
  kubectl_ delete clusterissuer "$CERT_MANAGER_ISSUER" --ignore-not-found --timeout=30s >/dev/null 2>&1 || true
  kubectl_ -n "$CERT_MANAGER_NS" delete deployment cert-manager --ignore-not-found --timeout=60s >/dev/null 2>&1 || true
  for crd in "${CERT_MANAGER_CRDS[@]}"; do
    kubectl_ delete crd "$crd.cert-manager.io" --ignore-not-found --timeout=120s >/dev/null || {
      log "warning: CRD $crd.cert-manager.io is not gone yet"
      ok=0
    }
  done
  kubectl_ delete clusterrolebinding/cert-manager-controller clusterrole/cert-manager-controller --ignore-not-found >/dev/null || ok=0
  kubectl_ delete namespace "$CERT_MANAGER_NS" --ignore-not-found --timeout=120s >/dev/null || {
    log "warning: namespace $CERT_MANAGER_NS is not gone yet"
    ok=0
  }
  if [ "$ok" = 0 ]; then
    log "CERT_MANAGER=0: not all of cert-manager is removed; CERT_MANAGER=0 hack/cluster.sh up tries again"
    return 1
  fi
  rm -rf "$CERT_MANAGER_DIR"
  log "CERT_MANAGER=0: cert-manager is removed"
}

# At the end of `up`, as converge_monitoring: installs cert-manager (CERT_MANAGER=1), removes one
# an earlier `up` installed (CERT_MANAGER=0) or leaves it (unset). Failures are warnings of `up`.
converge_cert_manager() {
  case $CERT_MANAGER in
    1) (start_cert_manager) || log "warning: cert-manager did not come up (above)" ;;
    0) if [ -d "$CERT_MANAGER_DIR" ]; then (stop_cert_manager) || log "warning: cert-manager is not all removed (above)"; fi ;;
  esac
}

# ---------------------------------------------------------------------------------------------
# nodes (NODES=N > 1; the layout is described in cluster-env.sh)

# node_scope NAME: in a subshell, makes the one-node functions above act on node NAME: its state
# and run directories stand where the host's are, its components are named NAME.COMPONENT and
# start in its network namespace.
node_scope() {
  node_env "$1"
  # Not N_NETNS: node_env also runs outside a scope (for a node's addresses), and must not make
  # the host's components start in that node.
  SCOPE_NETNS=$N_NETNS
  COMPONENT_PREFIX=$1.
  # The apiserver stays at the machine's address (reached through the host bridge).
  APISERVER_IP=$(node_ip)
  NODE_NAME=$1 NODE_IP=$N_IP
  STATE_DIR=$N_STATE RUN_DIR=$N_RUN
  CONTAINERD_CONFIG=$N_STATE/containerd/config.toml CONTAINERD_ROOT=$N_CONTAINERD_ROOT
  CONTAINERD_STATE=$N_RUN/containerd CONTAINERD_SOCK=$N_CONTAINERD_SOCK
  POD_CIDR=$N_POD_CIDR POD_GATEWAY=$N_POD_GATEWAY
  # Pod-to-pod traffic keeps its source address (NetworkPolicies match on it); kube-proxy takes
  # every node's pods as cluster traffic.
  CNI_IPMASQ=false CLUSTER_CIDR=$NODES_POD_CIDRS
  KUBELET_CERT=kubelet-$1
  NODE_LABELS=topology.kubernetes.io/zone=zone-$N_INDEX,topology.kubernetes.io/region=$NODES_REGION
}

# nodex CMD...: CMD in the current node's network namespace (the host's outside node_scope).
nodex() { if [ -n "${SCOPE_NETNS:-}" ]; then nsenter --net="$SCOPE_NETNS" -- "$@"; else "$@"; fi; }

# each_node CMD...: CMD in node_scope of every live node, one after the other.
each_node() {
  local n
  for n in $(live_nodes); do ( node_scope "$n" && "$@" ) || exit 1; done
}

# The host bridge: the nodes' links, and the cluster DNS address pods use on one node too.
setup_nodes_bridge() {
  ip link show "$NODES_BRIDGE" >/dev/null 2>&1 || ip link add "$NODES_BRIDGE" type bridge
  ip addr show dev "$NODES_BRIDGE" | grep -F "inet $DNS_IP/" >/dev/null || ip addr add "$DNS_IP/24" dev "$NODES_BRIDGE"
  ip link set "$NODES_BRIDGE" up
  # Node-to-node traffic crosses this bridge, and with br_netfilter the host's FORWARD chain:
  # accepted whatever its policy (the comment's CNI- prefix lets `down` remove the rules).
  local d
  for d in -i -o; do
    iptables -w -C FORWARD "$d" "$NODES_BRIDGE" -m comment --comment CNI-DEV-NODES -j ACCEPT 2>/dev/null ||
      iptables -w -I FORWARD "$d" "$NODES_BRIDGE" -m comment --comment CNI-DEV-NODES -j ACCEPT
  done
}

node_netns_mounted() { awk -v m="$N_NETNS" '$5 == m { found = 1 } END { exit !found }' /proc/self/mountinfo; }

# The node's network namespace, its link to the host bridge (eth0 inside, veth-NODE outside),
# its routes and sysctls; idempotent, and brings a cut link (`node lose`) up again.
setup_node_net() {
  local host_if=veth-$NODE_NAME m
  mkdir -p "$N_RUN"
  if ! node_netns_mounted; then
    : >"$N_NETNS"
    unshare --net="$N_NETNS" true
  fi
  if ! ip link show "$host_if" >/dev/null 2>&1; then
    # Made inside, its peer moved to the host's namespace ($$ is this script, on the host).
    nodex ip link add eth0 type veth peer name "$host_if" netns $$
  fi
  ip link set "$host_if" master "$NODES_BRIDGE" up
  nodex ip link set lo up
  nodex ip addr show dev eth0 | grep -F "inet $N_IP/" >/dev/null || nodex ip addr add "$N_IP/24" dev eth0
  nodex ip link set eth0 up
  nodex ip route replace default via "$DNS_IP" dev eth0
  # Each other node's pods directly through that node (the host bridge is one L2 segment).
  for m in $(node_names); do
    [ "$m" = "$NODE_NAME" ] && continue
    ( local ns=$N_NETNS && node_env "$m" && nsenter --net="$ns" -- ip route replace "$N_POD_CIDR" via "$N_IP" dev eth0 )
  done
  # The namespace's own sysctls (br_netfilter's are per namespace on this kernel).
  nodex sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1 net.bridge.bridge-nf-call-ip6tables=1
  # The host (operator, tests, apiserver webhooks) reaches Services through a node: when this node
  # sends such a connection on to a pod of another node, the reply must come back through here.
  local masq=(POSTROUTING -s "$DNS_IP/24" -m conntrack --ctstate DNAT -m comment --comment "host to a Service" -j MASQUERADE)
  nodex iptables -w -t nat -C "${masq[@]}" 2>/dev/null || nodex iptables -w -t nat -A "${masq[@]}"
  # The host reaches this node's pods through it.
  ip route replace "$N_POD_CIDR" via "$N_IP" dev "$NODES_BRIDGE"
}

# The node's volume filesystem at $PV_DIR/NODE (see NODE_PV_SIZE): the sparse file is the disk
# (`node restore --wipe` empties it, `down` removes it).
setup_node_pv() {
  local img=$N_STATE/pv.img
  mkdir -p "$N_PV_DIR"
  mountpoint -q "$N_PV_DIR" && return 0
  if [ ! -f "$img" ]; then
    truncate -s "$NODE_PV_SIZE" "$img.tmp"
    # No blocks reserved for root: `node fill` leaves a full disk to every writer.
    mkfs.ext4 -q -F -m 0 "$img.tmp"
    mv "$img.tmp" "$img"
  fi
  mount -o loop "$img" "$N_PV_DIR"
  chmod 0755 "$N_PV_DIR"
}

setup_node() {
  mkdir -p "$N_STATE" "$N_RUN"
  setup_node_net
  setup_node_pv
  write_kubeconfig "$STATE_DIR/kubelet.kubeconfig" "system:node:$NODE_NAME"
  write_kubeconfig "$STATE_DIR/kube-proxy.kubeconfig" system:kube-proxy
  write_containerd_config
  write_kubelet_config
  write_kube_proxy_config
}

# The host's route to Services: through every live node (flows spread by address), so that
# the operator and the tests on the host, and the apiserver's webhooks, reach ClusterIPs.
set_service_route() {
  local n hops=()
  for n in $(live_nodes); do
    node_env "$n"
    hops+=(nexthop via "$N_IP" dev "$NODES_BRIDGE")
  done
  if ((${#hops[@]})); then
    ip route replace "$SERVICE_CIDR" "${hops[@]}"
  else
    ip route del "$SERVICE_CIDR" 2>/dev/null || true
  fi
}

nodes_ready() {
  local n
  for n in $(live_nodes); do ( node_scope "$n" && node_ready ) || return 1; done
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
  [ "$("$DEVKIT" dns-query --server "$DNS_IP:53" "kubernetes.default.svc.$CLUSTER_DOMAIN" 2>/dev/null)" = "$KUBERNETES_SVC_IP" ]
}
all_running() {
  local c
  for c in "${COMPONENTS[@]}"; do
    [[ $c == node-*.* ]] && node_lost "${c%%.*}" && continue
    is_running "$c" || return 1
  done
}
# Pods can be created in namespace default (its ServiceAccount exists; on 1.20 with its token).
default_sa_ready() {
  local sa
  sa=$(kubectl_ -n default get serviceaccount default -o json 2>/dev/null) || return 1
  [ "$K8S_VERSION" = "$K8S_MODERN" ] || jq -e '.secrets[0].name' <<<"$sa" >/dev/null
}
healthy() {
  [ -f "$PKI_DIR/done" ] && all_running && apiserver_ready && if multi_node; then nodes_ready; else node_ready; fi &&
    dns_answers && default_sa_ready
}

apply_defaults() {
  # A class's provisioner cannot be changed: a cluster from before `devkit provision` has
  # `standard` on kubernetes.io/host-path, which is replaced (its bound volumes keep working; the
  # in-tree plugin deletes them when their claims go while the old controller-manager runs with
  # --enable-hostpath-provisioner; after a restart without it they turn Failed instead, and
  # their directories in $HOSTPATH_PV_DIR stay until `down`).
  # Likewise its binding mode: Immediate on one node, WaitForFirstConsumer on several (a volume
  # is a directory of one node, made once the scheduler has picked the node for the pod).
  local current mode=Immediate
  multi_node && mode=WaitForFirstConsumer
  current=$(kubectl_ get storageclass standard -o jsonpath='{.provisioner} {.volumeBindingMode}' --ignore-not-found)
  if [ -n "$current" ] && [ "$current" != "$PV_PROVISIONER $mode" ]; then
    log "replacing StorageClass standard ($current -> $PV_PROVISIONER $mode)"
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
$(if multi_node; then echo "volumeBindingMode: WaitForFirstConsumer"; else
    echo "# One node: nothing to wait for (and the operator's PVC members are tested the way most clusters bind)."
    echo "volumeBindingMode: Immediate"; fi)
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
  # Likewise its node count (the nodes' certificates and tokens are made once, at the first `up`).
  running=$(cat "$NODES_FILE" 2>/dev/null || true)
  if [ -z "$running" ] && [ -f "$PKI_DIR/done" ]; then running=1; fi
  if [ -n "$running" ] && [ "$running" != "$NODES" ]; then
    die "the local cluster runs $running node(s); \`hack/cluster.sh down\` first to start NODES=$NODES"
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
  if [ "$MONITORING" = 1 ] && [ "$K8S_VERSION" != "$K8S_MODERN" ]; then
    die "MONITORING=1 needs the modern leg: its install applies the Prometheus Operator's bundle server-side, which 1.20 refuses (its CRDs' x-kubernetes-validations)"
  fi
  if [ "$CERT_MANAGER" = 1 ] && [ "$K8S_VERSION" != "$K8S_MODERN" ]; then
    die "CERT_MANAGER=1 needs the modern leg: cert-manager's CRDs use x-kubernetes-validations (1.25+) and selectableFields (1.30+), and one is too big for a client-side apply"
  fi
  if multi_node && [ "$K8S_VERSION" != "$K8S_MODERN" ]; then
    die "NODES=$NODES needs the modern leg (the legacy one runs one node)"
  fi
  if [ "$NETPOL" = 0 ] && is_running netpol; then
    stop netpol
    clean_netpol
    log "NETPOL=0: NetworkPolicy enforcement stopped"
  fi
  local n
  for n in $(multi_node && [ "$NETPOL" = 0 ] && node_names); do
    ( node_scope "$n" && is_running netpol && stop netpol && clean_netpol && log "NETPOL=0: $n's enforcement stopped" ) || true
  done
  if healthy 2>/dev/null; then
    if multi_node; then
      log "cluster already up: Kubernetes $K8S_VERSION, nodes $(live_nodes | tr '\n' ' ')Ready; KUBECONFIG=$KUBECONFIG_PATH"
    else
      log "cluster already up: Kubernetes $K8S_VERSION, node $NODE_NAME Ready; KUBECONFIG=$KUBECONFIG_PATH"
    fi
    converge_monitoring
    converge_cert_manager
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
  # Before anything starts: a failed build stops `up` here.
  if [ "$MONITORING" = 1 ]; then bash "$HACK_DIR/images.sh" monitoring build; fi
  if [ "$CERT_MANAGER" = 1 ]; then bash "$HACK_DIR/images.sh" cert-manager build >/dev/null; fi
  check_tools
  mkdir -p "$STATE_DIR" "$RUN_DIR" "$LOG_DIR" "$PID_DIR"
  chmod 0755 "$STATE_DIR"
  echo "$K8S_VERSION" >"$STATE_DIR/k8s-version"
  echo "$NODES" >"$NODES_FILE"
  build_devkit
  bash "$HACK_DIR/images.sh" build

  # All ports first, so a conflict stops `up` before it changes anything on the host.
  need_ports etcd "$ETCD_CLIENT_PORT" "$ETCD_PEER_PORT"
  need_ports kube-apiserver "$APISERVER_PORT"
  need_ports kube-controller-manager 10257
  need_ports kube-scheduler 10259
  if ! multi_node; then
    need_ports kubelet 10250 10248
    need_ports kube-proxy 10249 10256
  fi
  save_host_state
  setup_sysctls
  make_pki
  write_kubeconfigs
  choose_snapshotter
  if multi_node; then
    setup_nodes_bridge
    each_node setup_node
  else
    write_containerd_config
    write_kubelet_config
    write_kube_proxy_config
    setup_bridge
  fi

  start_etcd
  if multi_node; then each_node start_containerd; else start_containerd; fi
  start_dnsmasq
  wait_for etcd 30 "healthy" etcd_healthy
  start_apiserver
  if multi_node; then
    each_node wait_for containerd 30 "its socket answering" containerd_healthy
  else
    wait_for containerd 30 "its socket answering" containerd_healthy
  fi
  bash "$HACK_DIR/images.sh" load
  wait_for kube-apiserver 60 "ready" apiserver_ready
  apply_defaults
  start_controller_manager
  start_scheduler
  if multi_node; then
    each_node start_kubelet
    each_node start_kube_proxy
  else
    start_kubelet
    start_kube_proxy
  fi
  start_dns_sync
  start_provisioner
  if multi_node; then
    each_node wait_for kubelet 60 "node Ready" node_ready
    set_service_route
  else
    wait_for kubelet 60 "node $NODE_NAME Ready" node_ready
  fi
  if [ "$NETPOL" = 1 ] && multi_node; then
    each_node start_netpol
    each_node wait_for netpol 60 "its first NetworkPolicy sync" netpol_synced
  elif [ "$NETPOL" = 1 ]; then
    start_netpol
    wait_for netpol 60 "its first NetworkPolicy sync" netpol_synced
  fi
  wait_for dns-sync 30 "DNS answers kubernetes.default.svc.$CLUSTER_DOMAIN" dns_answers
  wait_for kube-controller-manager 60 "the default ServiceAccount" default_sa_ready
  is_running dnsmasq || fail_component dnsmasq "is not running"
  is_running provisioner || fail_component provisioner "is not running"
  converge_monitoring
  converge_cert_manager
  if [ "$K8S_VERSION" = "$K8S_MODERN" ] && [ "$(stat -fc %T /sys/fs/cgroup)" != cgroup2fs ]; then
    log "note: this host has cgroup v1, deprecated by containerd 2.2 and kubelet 1.35 (kept working; see kubelet failCgroupV1)"
  fi
  if multi_node; then
    log "cluster up in $((SECONDS - t0))s: Kubernetes $K8S_VERSION, nodes $(live_nodes | tr '\n' ' ')Ready, DNS at $DNS_IP"
  else
    log "cluster up in $((SECONDS - t0))s: Kubernetes $K8S_VERSION, node $NODE_NAME Ready, DNS at $POD_GATEWAY"
  fi
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
  # Several nodes: the host bridge and the nodes' veths (their peers went with the namespaces),
  # the routes through them with them.
  for dev in $(ip -o link show type veth 2>/dev/null | awk -F': ' '{ print $2 }' | cut -d@ -f1 | grep '^veth-node-' || true); do
    ip link delete "$dev" 2>/dev/null || true
  done
  ip link delete "$NODES_BRIDGE" 2>/dev/null || true
  ip route del "$SERVICE_CIDR" 2>/dev/null || true
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

# The nodes whose state exists (whatever NODES says now: `down` removes what an `up` made).
made_nodes() { [ -d "$STATE_DIR/nodes" ] && ls "$STATE_DIR/nodes"; return 0; }

cmd_down() {
  need_root
  local c i n
  stop netpol   # whatever NETPOL says now: an earlier `up` may have started it
  # The nodes' agents first (their kube-proxy and kube-router rules go with their namespaces).
  for n in $(made_nodes); do
    ( node_scope "$n" && for c in netpol kube-proxy kubelet; do stop "$c"; done )
  done
  # Reverse start order: DNS first (dns-sync removes its /etc/hosts block on SIGTERM), then the
  # node agents, so nothing restarts pods while they are being killed.
  for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do
    c=${COMPONENTS[i]}
    case $c in kube-apiserver | etcd | containerd | node-*) continue ;; esac
    stop "$c"
  done
  # A one-node layout's agents too when NODES says otherwise (and the reverse above).
  for c in kube-proxy kubelet; do stop "$c"; done
  kill_pods
  for n in $(made_nodes); do ( node_scope "$n" && kill_pods ); done
  for c in kube-apiserver etcd containerd; do stop "$c"; done
  for n in $(made_nodes); do ( node_scope "$n" && stop containerd && kill_pods ); done
  kill_pods   # anything containerd started while it was going down
  # Mounts: the nodes' network namespaces and volume filesystems (a loop device goes with its
  # mount) are under these too.
  unmount_under "$STATE_DIR" "$RUN_DIR"
  remove_container_cgroups
  remove_network
  clean_netpol
  clean_iptables
  conntrack -D -s "$POD_CIDR" >/dev/null 2>&1 || true
  conntrack -D -s "$NODES_POD_CIDRS" >/dev/null 2>&1 || true
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
    if multi_node; then
      local n r all=True
      for n in $(node_names); do
        node_env "$n"
        r=$(kubectl_ get node "$n" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null || true)
        node_lost "$n" && r="${r:-not registered}, lost (cluster.sh node restore $n)"
        [ "$r" = True ] || all=False
        printf '%-24s %s\n' "node $n" "Ready=${r:-not registered} ip $N_IP pods $N_POD_CIDR zone zone-$N_INDEX"
      done
      ready=$all
    else
      printf '%-24s %s\n' "node $NODE_NAME" "Ready=${ready:-not registered}"
    fi
  else
    printf '%-24s %s\n' "apiserver" "not ready"
  fi
  if [ -x "$DEVKIT" ] && dns_answers; then
    printf '%-24s %s\n' "cluster DNS" "answers at $DNS_IP"
  else
    printf '%-24s %s\n' "cluster DNS" "not answering"
  fi
  if [ -f "$MONITORING_DIR/installed" ] && [ -f "$PKI_DIR/done" ] && apiserver_ready 2>/dev/null; then
    local url
    if url=$(prometheus_url) && prometheus_ready; then
      printf '%-24s %s\n' "prometheus" "ready at $url (service $MONITORING_NS/$PROMETHEUS_SERVICE; MONITORING=1)"
    else
      printf '%-24s %s\n' "prometheus" "not ready (service $MONITORING_NS/$PROMETHEUS_SERVICE; MONITORING=1)"
    fi
  fi
  if [ -f "$CERT_MANAGER_DIR/installed" ] && [ -f "$PKI_DIR/done" ] && apiserver_ready 2>/dev/null; then
    if cert_manager_available && cert_manager_issuer_ready; then
      printf '%-24s %s\n' "cert-manager" "available (deployment $CERT_MANAGER_NS/cert-manager, ClusterIssuer $CERT_MANAGER_ISSUER; CERT_MANAGER=1)"
    else
      printf '%-24s %s\n' "cert-manager" "not available (deployment $CERT_MANAGER_NS/cert-manager; CERT_MANAGER=1)"
    fi
  fi
  printf '%-24s %s\n' "kubernetes" "$K8S_VERSION (K8S_VERSION=1.37|1.20 picks the leg at \`up\`)"
  printf '%-24s %s\n' "nodes" "$NODES (NODES=N picks the count at the first \`up\`)"
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

# ---------------------------------------------------------------------------------------------
# node faults (`cluster.sh node ...`, several nodes only)

# lose NODE: as when the machine dies. Its link is cut first (peers and the control plane hear
# nothing more: no FIN, no RST, no last status), then its kubelet, kube-proxy, kube-router,
# containerd, shims and every container process are SIGKILLed at once, and what a reboot clears
# is cleared: its run directory (containerd's state, the pods' network namespaces, runc's
# state) and the kubelet's mounts. Its disk stays (containerd's images, the kubelet's root with
# the emptyDir volumes, its volume filesystem). The API keeps its Node and pods as they were:
# the Node goes NotReady after the node-monitor grace period, its pods are marked for eviction
# after their tolerationSeconds (300 s by default), and stay Terminating (nothing confirms their
# end), as on a real cluster.
node_lose() {
  node_scope "$1"
  if [ -f "$N_STATE/lost" ]; then log "$NODE_NAME is lost already"; return 0; fi
  touch "$N_STATE/lost"   # first: an `up` from now on leaves this node alone
  ip link set "veth-$NODE_NAME" down
  local c p pids=() shims
  for c in netpol kube-proxy kubelet containerd; do
    p=$(component_pid "$c")
    rm -f "$(pidfile "$c")"
    [ -z "$p" ] || pids+=("$p" $(descendants "$p"))
  done
  shims=$(shim_pids)
  pids+=($shims $( { [ -z "$shims" ] || descendants $shims; orphan_container_pids; } | sort -u))
  if ((${#pids[@]})); then kill_pids KILL "${pids[@]}"; fi
  unmount_under "$N_RUN/containerd" "$N_KUBELET_ROOT"
  rm -rf "$N_RUN/containerd" "$N_RUN/runc"
  log "$NODE_NAME lost: link cut, ${#pids[@]} processes killed (\`cluster.sh node restore $NODE_NAME [--wipe]\` brings it back)"
}

# restore NODE [--wipe]: boots the node again (link up, containerd, the images it misses,
# kubelet, kube-proxy, kube-router), with its disk, or with --wipe a new disk: no images (imported
# again), no containerd or kubelet state, no pod logs, an empty volume filesystem. A running node
# is lost first (a restore is a reboot).
node_restore() {
  local name=$1 wipe=${2:-}
  ( node_lost "$name" ) || ( node_lose "$name" )
  if [ "$wipe" = --wipe ]; then
    (
      node_scope "$name"
      log "wiping $NODE_NAME's disk"
      unmount_under "$N_STATE" "$N_PV_DIR"
      rm -rf "$N_STATE/containerd" "$N_KUBELET_ROOT" "$N_STATE/pod-logs" "$N_STATE/cni" "$N_STATE/pv.img"
      rmdir "$N_PV_DIR" 2>/dev/null || true
    )
  fi
  node_env "$name"
  rm -f "$N_STATE/lost"
  cmd_up
}

# The fault chains of a node's network namespace, in the mangle table: PREROUTING sees what
# arrives before any NAT (its real source), POSTROUTING what leaves after kube-proxy's DNAT (its
# real destination), and neither kube-proxy nor kube-router rewrites them.
FAULT_IN=DEV-FAULT-IN FAULT_OUT=DEV-FAULT-OUT
ensure_fault_chains() {
  local c hook
  for c in "$FAULT_IN:PREROUTING" "$FAULT_OUT:POSTROUTING"; do
    hook=${c#*:} c=${c%%:*}
    nodex iptables -w -t mangle -N "$c" 2>/dev/null || true
    nodex iptables -w -t mangle -C "$hook" -j "$c" 2>/dev/null || nodex iptables -w -t mangle -I "$hook" 1 -j "$c"
  done
}

# partition A B [--one-way]: A and B cannot reach each other (both directions), or with
# --one-way nothing from A reaches B while B's packets still reach A. The rules sit in A's
# namespace: B's node address and pod CIDR, comment "partition B".
node_partition() {
  local a=$1 b=$2 mode=${3:-} b_ip b_cidr
  [ "$a" != "$b" ] || die "partition: two different nodes"
  node_env "$b"; b_ip=$N_IP b_cidr=$N_POD_CIDR
  (
    node_scope "$a"
    ensure_fault_chains
    local d
    for d in "$b_ip" "$b_cidr"; do
      nodex iptables -w -t mangle -A "$FAULT_OUT" -d "$d" -m comment --comment "partition $b" -j DROP
      [ "$mode" = --one-way ] || nodex iptables -w -t mangle -A "$FAULT_IN" -s "$d" -m comment --comment "partition $b" -j DROP
    done
  )
  log "partition: $a $([ "$mode" = --one-way ] && echo '->' || echo '<->') $b (\`cluster.sh node heal\` ends it)"
}

# heal [NODE...]: removes every partition (of those nodes; all without one); latency and loss stay.
node_heal() {
  local n names=("$@")
  ((${#names[@]})) || mapfile -t names < <(node_names)
  for n in "${names[@]}"; do
    (
      node_scope "$n"
      node_netns_mounted || exit 0
      local rule
      { nodex iptables -w -t mangle -S 2>/dev/null | grep -E -- "^-A DEV-FAULT-(IN|OUT) .*\"?partition " || true; } |
        while read -r rule; do eval "nodex iptables -w -t mangle ${rule/-A /-D }"; done
    )
  done
  log "healed: ${names[*]}"
}

# netem NODE DELAY [LOSS] | netem NODE off: DELAY (e.g. 100ms) on each direction of the node's
# link and LOSS percent (e.g. 5) of its packets dropped, with tc's netem when this kernel has it.
# Without netem (CONFIG_NET_SCH_NETEM), loss is made with iptables' statistic match in the
# node's fault chains, and a DELAY other than 0 is refused (exit status 3): nothing here can hold
# packets back.
have_netem() {
  [ -n "${HAVE_NETEM:-}" ] && return "$HAVE_NETEM"
  HAVE_NETEM=1
  ip link add devnetem0 type dummy 2>/dev/null || return 1
  tc qdisc add dev devnetem0 root netem delay 1ms 2>/dev/null && HAVE_NETEM=0
  ip link delete devnetem0 2>/dev/null || true
  return "$HAVE_NETEM"
}
node_netem() {
  local name=$1 delay=${2:-} loss=${3:-0}
  [ -n "$delay" ] || die "usage: cluster.sh node netem NODE DELAY [LOSS%] | netem NODE off"
  node_scope "$name"
  # Off first: netem settings replace each other.
  tc qdisc del dev "veth-$NODE_NAME" root 2>/dev/null || true
  nodex tc qdisc del dev eth0 root 2>/dev/null || true
  ensure_fault_chains
  local rule
  { nodex iptables -w -t mangle -S | grep -E -- '^-A DEV-FAULT-(IN|OUT) .*"?netem' || true; } |
    while read -r rule; do eval "nodex iptables -w -t mangle ${rule/-A /-D }"; done
  if [ "$delay" = off ]; then log "$NODE_NAME: no latency or loss"; return 0; fi
  [[ $loss =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "netem: LOSS is a percentage (e.g. 5 or 0.5)"
  if have_netem; then
    local args=(delay "$delay")
    [ "$loss" = 0 ] || args+=(loss "$loss%")
    tc qdisc add dev "veth-$NODE_NAME" root netem "${args[@]}"
    nodex tc qdisc add dev eth0 root netem "${args[@]}"
    log "$NODE_NAME: netem ${args[*]} on each direction of its link"
    return 0
  fi
  if [ "$delay" != 0 ] && [ "$delay" != 0ms ]; then
    log "this kernel has no netem qdisc (CONFIG_NET_SCH_NETEM is not set, and there are no modules to load): latency cannot be added here; loss can (DELAY 0)"
    exit 3
  fi
  local p
  p=$(awk -v l="$loss" 'BEGIN { printf "%.4f", l / 100 }')
  nodex iptables -w -t mangle -A "$FAULT_IN" -i eth0 -m statistic --mode random --probability "$p" -m comment --comment "netem loss $loss%" -j DROP
  nodex iptables -w -t mangle -A "$FAULT_OUT" -o eth0 -m statistic --mode random --probability "$p" -m comment --comment "netem loss $loss%" -j DROP
  log "$NODE_NAME: $loss% of its link's packets dropped each way (iptables statistic; no netem in this kernel)"
}

# fill NODE / unfill NODE: the node's volume filesystem full (a file .fill takes every free
# block), or that file removed.
node_fill() {
  node_env "$1"
  mountpoint -q "$N_PV_DIR" || die "$1 has no volume filesystem at $N_PV_DIR"
  fallocate -l "$(df -B1 --output=avail "$N_PV_DIR" | tail -n1)" "$N_PV_DIR/.fill" 2>/dev/null || true
  # What fallocate could not take (metadata rounding), byte by byte writes do.
  dd if=/dev/zero of="$N_PV_DIR/.fill" bs=64k oflag=append conv=notrunc status=none 2>/dev/null || true
  log "$1's volumes are full: $(df -h --output=used,avail "$N_PV_DIR" | tail -n1 | awk '{ print $1 " used, " $2 " free" }')"
}
node_unfill() {
  node_env "$1"
  rm -f "$N_PV_DIR/.fill"
  log "$1's volumes have room again"
}

cmd_node() {
  local verb=${1:-} usage="usage: cluster.sh node list | lose NODE | restore NODE [--wipe] | partition A B [--one-way] | heal [NODE...] | netem NODE DELAY [LOSS%] | netem NODE off | fill NODE | unfill NODE"
  shift || true
  [ -n "$verb" ] || die "$usage"
  multi_node || die "node faults need several nodes: this cluster runs one ($(node_name)); \`cluster.sh down\`, then NODES=3 \`cluster.sh up\`"
  # The node arguments name nodes of this cluster (node_env says which there are).
  local n names=()
  case $verb in partition) names=("${@:1:2}") ;; heal) names=("$@") ;; list) ;; *) names=("${@:1:1}") ;; esac
  for n in "${names[@]}"; do ( node_env "$n" ) || exit 1; done
  case $verb in
    list)
      for n in $(node_names); do
        node_env "$n"
        printf '%s %s %s zone-%s %s\n' "$n" "$N_IP" "$N_POD_CIDR" "$N_INDEX" "$(node_lost "$n" && echo lost || echo up)"
      done
      ;;
    lose) [ $# = 1 ] || die "$usage"; ( node_lose "$1" ); set_service_route ;;
    restore) [ $# = 1 ] || { [ $# = 2 ] && [ "$2" = --wipe ]; } || die "$usage"; node_restore "$@" ;;
    partition) [ $# = 2 ] || { [ $# = 3 ] && [ "$3" = --one-way ]; } || die "$usage"; node_partition "$@" ;;
    heal) node_heal "$@" ;;
    netem) [ $# = 2 ] || [ $# = 3 ] || die "$usage"; ( node_netem "$@" ) ;;
    fill) [ $# = 1 ] || die "$usage"; node_fill "$1" ;;
    unfill) [ $# = 1 ] || die "$usage"; node_unfill "$1" ;;
    *) die "$usage" ;;
  esac
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
  # lose and restore start and stop components: one at a time with up/down/restart.
  node) need_root; case ${2:-} in lose | restore) locked "$@" ;; esac; shift; cmd_node "$@" ;;
  status) cmd_status ;;
  kubeconfig) echo "$KUBECONFIG_PATH" ;;
  logs) shift; cmd_logs "$@" ;;
  *) echo "usage: $0 up|down|restart [COMPONENT...]|status|kubeconfig|logs [COMPONENT] [LINES]|node ..." >&2; exit 2 ;;
esac
