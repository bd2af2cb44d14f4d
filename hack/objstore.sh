#!/usr/bin/env bash
# Object-storage servers for the backup/restore tests: moto (S3, from PyPI) and Azurite (Azure
# Blob, from npm), installed under $CACHE_DIR/objstore from the pins in hack/objstore/.
#
#   objstore.sh install          install both (idempotent: a quick no-op when the pins are installed)
#   objstore.sh moto PORT        run moto's S3 server on 0.0.0.0:PORT in the foreground (exec)
#   objstore.sh azurite PORT DIR run Azurite's blob service on 0.0.0.0:PORT, data in DIR (exec)
#   objstore.sh paths            print where things are installed
#
# The tests (crates/e2e/src/objstore/) start and stop the servers themselves through the two
# runners; nothing here runs in the background. hack/deps.sh calls `install`.
set -euo pipefail
source "$(dirname "$0")/common.sh"

OBJSTORE_DIR=$CACHE_DIR/objstore
PINS_DIR=$HACK_DIR/objstore
# Debian's python3 (3.11 on Debian 12), not whatever python3 comes first on PATH: the venv
# must not depend on a per-user interpreter that a fresh machine may not have.
PYTHON=${OBJSTORE_PYTHON:-/usr/bin/python3}
MOTO_VENV=$OBJSTORE_DIR/moto-venv
WHEEL_DIR=$OBJSTORE_DIR/wheels
AZURITE_DIR=$OBJSTORE_DIR/azurite
NPM_CACHE=$OBJSTORE_DIR/npm-cache
STAMP=.etcd-operator-installed

# What an installation was made from: a change of the pins (or of the interpreter/node major
# version) makes the next `install` redo it.
moto_wanted() { printf '%s python=%s\n' "$(sha256sum <"$PINS_DIR/requirements.txt" | cut -d' ' -f1)" "$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"; }
azurite_wanted() { printf '%s node=%s\n' "$(cat "$PINS_DIR/package.json" "$PINS_DIR/package-lock.json" | sha256sum | cut -d' ' -f1)" "$(node -p 'process.versions.node.split(".")[0]')"; }
moto_ok() { [ -x "$MOTO_VENV/bin/moto_server" ] && [ "$(cat "$MOTO_VENV/$STAMP" 2>/dev/null)" = "$(moto_wanted)" ]; }
azurite_ok() { [ -x "$AZURITE_DIR/node_modules/.bin/azurite-blob" ] && [ "$(cat "$AZURITE_DIR/$STAMP" 2>/dev/null)" = "$(azurite_wanted)" ]; }

apt_install() {
  log "installing Debian packages: $*"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

install_moto() {
  if ! [ -x "$PYTHON" ] || ! "$PYTHON" -c 'import venv, ensurepip' 2>/dev/null; then
    [ "$PYTHON" = /usr/bin/python3 ] || die "$PYTHON cannot make a venv"
    apt_install python3 python3-venv
  fi
  moto_ok && return 0
  log "installing moto (hack/objstore/requirements.txt) into $MOTO_VENV"
  # A venv is not relocatable (its scripts name their interpreter by absolute path): build it in
  # place; the stamp, written last, is what says it is complete.
  rm -rf "$MOTO_VENV"
  "$PYTHON" -m venv "$MOTO_VENV"
  local pip=("$MOTO_VENV/bin/python" -m pip --disable-pip-version-check --no-input -q)
  mkdir -p "$WHEEL_DIR"
  # Offline from the wheel cache when it has everything; otherwise fetch what is missing first.
  if ! "${pip[@]}" install --no-index --find-links "$WHEEL_DIR" -r "$PINS_DIR/requirements.txt" 2>/dev/null; then
    "${pip[@]}" download --only-binary=:all: --dest "$WHEEL_DIR" -r "$PINS_DIR/requirements.txt" \
      || die "pip download of hack/objstore/requirements.txt failed"
    "${pip[@]}" install --no-index --find-links "$WHEEL_DIR" -r "$PINS_DIR/requirements.txt" \
      || die "pip install of hack/objstore/requirements.txt failed"
  fi
  "$MOTO_VENV/bin/python" -c 'import moto.server, flask' || die "moto is installed but does not import"
  moto_wanted >"$MOTO_VENV/$STAMP"
}

install_azurite() {
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    apt_install nodejs npm
  fi
  azurite_ok && return 0
  log "installing azurite (hack/objstore/package-lock.json) into $AZURITE_DIR"
  rm -rf "$AZURITE_DIR"
  mkdir -p "$AZURITE_DIR" "$NPM_CACHE"
  cp "$PINS_DIR/package.json" "$PINS_DIR/package-lock.json" "$AZURITE_DIR/"
  (cd "$AZURITE_DIR" && npm ci --omit=dev --no-audit --no-fund --loglevel=error --prefer-offline --cache "$NPM_CACHE" >/dev/null) \
    || die "npm ci of hack/objstore/package-lock.json failed"
  "$AZURITE_DIR/node_modules/.bin/azurite-blob" --version >/dev/null || die "azurite-blob is installed but does not run"
  azurite_wanted >"$AZURITE_DIR/$STAMP"
}

cmd_install() {
  mkdir -p "$OBJSTORE_DIR"
  # Two installs at once (a test's fallback beside hack/deps.sh) must not build into each other.
  exec 9>"$OBJSTORE_DIR/install.lock"
  flock 9
  install_moto
  install_azurite
  exec 9>&-
}

cmd_moto() {
  local port=${1:?usage: objstore.sh moto PORT}
  moto_ok || die "moto is not installed (or its pins changed): run hack/objstore.sh install"
  # Unbuffered, so the log file a test reads is current.
  export PYTHONUNBUFFERED=1
  exec "$MOTO_VENV/bin/moto_server" -H 0.0.0.0 -p "$port"
}

cmd_azurite() {
  local port=${1:?usage: objstore.sh azurite PORT DIR} dir=${2:?usage: objstore.sh azurite PORT DIR}
  azurite_ok || die "azurite is not installed (or its pins changed): run hack/objstore.sh install"
  mkdir -p "$dir"
  # --disableTelemetry: without it Azurite sends usage data to an Azure endpoint (and logs the
  #   failed DNS lookup, as this machine reaches no such host).
  # --skipApiVersionCheck: clients newer than this Azurite (object_store, azure SDKs) send an
  #   x-ms-version it does not know; the blob operations the tests use are the same.
  # --loose: ignore headers and parameters Azurite does not implement instead of failing.
  # --disableProductStyleUrl: the account is always the first path segment
  #   (http://HOST:PORT/devstoreaccount1/...), whatever the host name looks like.
  exec "$AZURITE_DIR/node_modules/.bin/azurite-blob" --blobHost 0.0.0.0 --blobPort "$port" --location "$dir" \
    --disableTelemetry --skipApiVersionCheck --loose --disableProductStyleUrl
}

case "${1:-}" in
  install) cmd_install ;;
  moto) shift; cmd_moto "$@" ;;
  azurite) shift; cmd_azurite "$@" ;;
  paths)
    echo "moto_server  $MOTO_VENV/bin/moto_server"
    echo "azurite-blob $AZURITE_DIR/node_modules/.bin/azurite-blob"
    echo "wheels       $WHEEL_DIR"
    echo "npm cache    $NPM_CACHE"
    ;;
  *) die "usage: objstore.sh install | moto PORT | azurite PORT DIR | paths" ;;
esac
