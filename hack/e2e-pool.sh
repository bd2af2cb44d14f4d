#!/usr/bin/env bash
# Runs end-to-end tests concurrently: each test its own process (its own namespace, its own
# operator), up to E2E_JOBS at a time, the slowest first (by the durations the last run recorded),
# each file of SERIAL_FILES as one job (its tests one after the other). Prints a line per test as
# it ends (the log tail when it failed) and a table of the slowest at the end.
#
#   hack/e2e-pool.sh OUT_DIR SPEC...
#     SPEC: MODE@FILE (every test of crates/e2e/tests/FILE.rs), MODE@FILE:TEST (one test, exactly)
#           or MODE@FILE:~TEXT (the tests whose names contain TEXT); MODE is process|in-cluster.
#   E2E_JOBS     how many at a time (default 4: on 2 cores, 5 took 12% less time than 3 but
#                overloaded the machine enough for a peer dial to time out; see
#                docs/src/results/2026-11-28-suite-session-16.md)
#   E2E_FILTER   run only tests whose names contain this
#   E2E_SKIP     space-separated: skip tests whose names contain any of these
# Writes OUT_DIR/<job>.log per job and OUT_DIR/results.tsv (status, seconds, mode, file, test);
# the logs carry libtest's "test result:" lines for hack/test.sh's count. Exit 1 if any failed.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$REPO_DIR"
out=$1; shift
mkdir -p "$out"
jobs=${E2E_JOBS:-4}
times=$CACHE_DIR/e2e-times.tsv # seconds, mode, file, test of the last run of each (for the order)
SERIAL_FILES=" cluster_wide " # a cluster-wide operator takes every namespace's annotated clusters

# The test binaries, built once: file -> executable.
declare -A exe
cargo test -p e2e --tests --no-run --locked --message-format=json 2>"$out/build.log" >"$out/build.json" || {
  cat "$out/build.log" >&2
  printf 'FAIL\t0\tbuild\tcrates/e2e\t(the e2e tests do not build)\n' >>"$out/results.tsv"
  echo "0 1" >"$out/count"
  exit 1
}
# The plugin tests/kubectl_etcd.rs runs (target/debug/kubectl-etcd).
cargo build -p kubectl-etcd --locked 2>>"$out/build.log" || echo "cargo build -p kubectl-etcd failed: the kubectl_etcd tests will fail" >&2
while IFS=$'\t' read -r name path; do exe[$name]=$path; done < <(
  jq -r 'select(.reason == "compiler-artifact" and .profile.test == true and (.target.kind | index("test")) and .executable != null) | [.target.name, .executable] | @tsv' "$out/build.json")

skip() { # does test name $1 fall under E2E_FILTER / E2E_SKIP?
  [ -n "${E2E_FILTER:-}" ] && [[ $1 != *"$E2E_FILTER"* ]] && return 0
  local s
  for s in ${E2E_SKIP:-}; do [[ $1 == *"$s"* ]] && return 0; done
  return 1
}
tests_of() { # the runnable (not ignored) tests of file $1, one a line
  local e=${exe[$1]:-}
  [ -n "$e" ] || die "no e2e test file $1 (crates/e2e/tests/$1.rs)"
  comm -23 <("$e" --list --format=terse 2>/dev/null | sed -n 's/: test$//p' | sort) \
    <("$e" --list --format=terse --ignored 2>/dev/null | sed -n 's/: test$//p' | sort)
}

# Jobs: "mode file test" (test "*" = the whole file, serially, with E2E_FILTER/E2E_SKIP applied).
: >"$out/jobs"
for spec in "$@"; do
  mode=${spec%%@*} rest=${spec#*@}
  file=${rest%%:*} sel=""
  [[ $rest == *:* ]] && sel=${rest#*:}
  mapfile -t names < <(tests_of "$file")
  if [ "${#names[@]}" = 0 ]; then
    # A spec that selects nothing (a renamed test or file) must not pass silently.
    printf 'FAIL\t0\t%s\t%s\t%s\n' "$mode" "$file" "(no tests)" >>"$out/results.tsv"
    continue
  fi
  if [[ $SERIAL_FILES == *" $file "* ]] && [ -z "$sel" ]; then
    echo "$mode $file *" >>"$out/jobs"; continue
  fi
  found=0
  for t in "${names[@]}"; do
    case $sel in
      "") ;;
      "~"*) [[ $t == *"${sel#\~}"* ]] || continue ;;
      *) [ "$t" = "$sel" ] || continue ;;
    esac
    found=1
    skip "$t" || echo "$mode $file $t" >>"$out/jobs"
  done
  [ "$found" = 1 ] || printf 'FAIL\t0\t%s\t%s\t%s\n' "$mode" "$file" "$sel (no such test)" >>"$out/results.tsv"
done

# Slowest first (unknown ones first of all: they may be slow).
sort_jobs() {
  awk -v times="$times" 'BEGIN { while ((getline l < times) > 0) { split(l, f, "\t"); t[f[2] " " f[3] " " f[4]] = f[1] } }
    { k = $0; print (k in t ? t[k] : 99999) "\t" $0 }' | sort -t$'\t' -k1,1nr | cut -f2-
}

run_one() { # mode file test: runs it, logs, appends the result line, prints one line
  local mode=$1 file=$2 t=$3 e=${exe[$2]} log start secs rc=0 args
  log="$out/$mode-$file-${t//[^A-Za-z0-9_]/_}.log"
  if [ "$t" = "*" ]; then
    args=(--test-threads=1)
    [ -n "${E2E_FILTER:-}" ] && args+=("$E2E_FILTER")
    local s; for s in ${E2E_SKIP:-}; do args+=(--skip "$s"); done
  else
    args=(--exact "$t" --test-threads=1)
  fi
  start=$(date +%s)
  (cd crates/e2e && E2E_OPERATOR=$mode "$e" "${args[@]}") >"$log" 2>&1 || rc=$?
  secs=$(($(date +%s) - start))
  if [ "$rc" = 0 ] && grep -q '^test result: ok' "$log"; then
    printf 'ok\t%s\t%s\t%s\t%s\n' "$secs" "$mode" "$file" "$t" >>"$out/results.tsv"
    log "ok     ${secs}s $mode $file $t"
  else
    printf 'FAIL\t%s\t%s\t%s\t%s\n' "$secs" "$mode" "$file" "$t" >>"$out/results.tsv"
    log "FAILED ${secs}s $mode $file $t (log: $log); its last lines:"
    tail -n 40 "$log" | sed 's/^/    /' >&2
  fi
}

export -f run_one log
export out
exe_dump=$(declare -p exe)
export exe_dump
n=$(wc -l <"$out/jobs")
log "e2e: $n jobs, $jobs at a time"
sort_jobs <"$out/jobs" | xargs -r -P "$jobs" -L 1 bash -c 'eval "$exe_dump"; run_one "$@"' _

# Remember the durations for the next run's order (successful runs only), and show the slowest.
# (No `[ -f ] && cat` in the pipe: under pipefail its false made the first run never save.)
if [ -s "$out/results.tsv" ]; then
  mkdir -p "$CACHE_DIR"
  { awk -F'\t' '$1 == "ok" { print $2 "\t" $3 "\t" $4 "\t" $5 }' "$out/results.tsv"
    if [ -f "$times" ]; then cat "$times"; fi; } | awk -F'\t' '!seen[$2 "\t" $3 "\t" $4]++' >"$times.new" && mv "$times.new" "$times"
  echo
  echo "slowest e2e tests (seconds):"
  sort -t$'\t' -k2,2nr "$out/results.tsv" | awk -F'\t' 'NR <= 12 { printf "  %6s  %-4s %-10s %s:%s\n", $2, $1, $3, $4, $5 }'
fi
# The count: libtest's own numbers from every log, plus a failure for each job that ended without
# a "test result:" line (a crash, a timeout) and each spec that selected nothing.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { print p + 0, f + 0 }' "$out"/*.log 2>/dev/null >"$out/count" || echo "0 0" >"$out/count"
extra=0
while IFS=$'\t' read -r st _ mode file t; do
  [ "$st" = FAIL ] || continue
  l="$out/$mode-$file-${t//[^A-Za-z0-9_]/_}.log"
  [ -f "$l" ] && grep -q '^test result:' "$l" || extra=$((extra + 1))
done <"$out/results.tsv"
read -r p f <"$out/count"
echo "$p $((f + extra))" >"$out/count"
! grep -q '^FAIL' "$out/results.tsv" 2>/dev/null
