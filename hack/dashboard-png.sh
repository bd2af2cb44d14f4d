#!/usr/bin/env bash
# The operator's Grafana dashboard drawn to a PNG from a Prometheus' data (issue 31): a person
# can look at what the dashboard shows without running Grafana. matplotlib comes from PyPI,
# pinned in hack/dashboard/requirements.txt, into a venv under $CACHE_DIR/dashboard (cached:
# a second run with the pins installed installs nothing).
#
#   dashboard-png.sh install
#   dashboard-png.sh render --prometheus URL --dashboard FILE --namespace NS --cluster NAME --out PNG
#                           [--minutes 15] [--step 15]
#
# crates/e2e/tests/prometheus_stack.rs renders the dashboard of its cluster from the local
# cluster's Prometheus (MONITORING=1 hack/cluster.sh up) into target/e2e-logs/.
set -euo pipefail
source "$(dirname "$0")/common.sh"

DIR=$CACHE_DIR/dashboard
PINS=$HACK_DIR/dashboard/requirements.txt
# Debian's python3, as for moto (hack/objstore.sh): not a per-user interpreter.
PYTHON=${DASHBOARD_PYTHON:-/usr/bin/python3}
VENV=$DIR/venv
WHEELS=$DIR/wheels
STAMP=.etcd-operator-installed

wanted() { printf '%s python=%s\n' "$(sha256sum <"$PINS" | cut -d' ' -f1)" "$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"; }
installed() { [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/$STAMP" 2>/dev/null)" = "$(wanted)" ]; }

cmd_install() {
  mkdir -p "$DIR"
  exec 9>"$DIR/install.lock"
  flock 9
  installed && return 0
  "$PYTHON" -c 'import venv, ensurepip' 2>/dev/null || die "$PYTHON cannot make a venv (hack/deps.sh installs python3-venv)"
  log "installing matplotlib (hack/dashboard/requirements.txt) into $VENV"
  # A venv is not relocatable: built in place; the stamp, written last, says it is complete.
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  local pip=("$VENV/bin/python" -m pip --disable-pip-version-check --no-input -q)
  mkdir -p "$WHEELS"
  if ! "${pip[@]}" install --no-index --find-links "$WHEELS" -r "$PINS" 2>/dev/null; then
    "${pip[@]}" download --only-binary=:all: --dest "$WHEELS" -r "$PINS" || die "pip download of $PINS failed"
    "${pip[@]}" install --no-index --find-links "$WHEELS" -r "$PINS" || die "pip install of $PINS failed"
  fi
  "$VENV/bin/python" -c 'import matplotlib' || die "matplotlib is installed but does not import"
  wanted >"$VENV/$STAMP"
  exec 9>&-
}

case "${1:-}" in
  install) cmd_install ;;
  render)
    shift
    cmd_install
    # Fonts are matplotlib's own (DejaVu, in its wheel); its cache goes with the venv.
    MPLCONFIGDIR=$DIR/mplconfig exec "$VENV/bin/python" "$HACK_DIR/dashboard/render.py" "$@"
    ;;
  *) die "usage: dashboard-png.sh install | render --prometheus URL --dashboard FILE --namespace NS --cluster NAME --out PNG" ;;
esac
