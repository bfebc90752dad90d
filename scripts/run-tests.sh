#!/usr/bin/env bash
# Runs lint and the whole suite (`make test`). Where a Docker engine answers, or can be started (root
# with apt-get: scripts/kind/engine.sh installs and starts one), the Kubernetes half runs for real: the
# dm image is built, a kind cluster is created with it (scripts/kind/cluster.sh) and the e2e suite runs
# on it — beside the rest of the suite, which needs no cluster: the two mostly wait (on brokers, on
# pods), so side by side they take the time of the longer one on this 2-core machine instead of the
# sum (DM_TEST_SERIAL=1 runs them one after the other). The cluster is deleted at the end. A failure
# to set it up fails the run, and the e2e and image tests then fail rather than skip
# (DM_E2E_REQUIRED, DM_IMAGE_REQUIRED). Skip reasons and rerun tests are printed (-rsR), with the slowest tests, and a
# run in which Kubernetes tests skipped says so at the end. pytest's "no tests collected" (exit 5)
# is a failure. The rest of the suite runs in DM_TEST_WORKERS pytest-xdist workers (2), a test file
# per worker at a time: its tests mostly wait on broker processes, so two workers halve its time.
# Beside the e2e lane it runs at a lower CPU priority (DM_TEST_NICE, 10): the e2e lane is the longer
# one, and the kind nodes share one cgroup whose weight equals a single process's, so without this the
# other lane's dozens of processes starve the whole cluster (docs/testing.md, "Where the CPU goes").
#   run-tests.sh ARGS...  one pytest run with ARGS (the cluster is set up first where it can be)
#   DM_KIND_KEEP=1        keep the kind cluster afterwards, and reuse a kept one
#   DM_TEST_WORKERS=0     the rest of the suite in one process
#   DM_E2E_WORKERS=0      e2e scenarios one after the other (2 by default: side by side on the one
#                         cluster; those that stop the operator or a node hold it alone, tests/e2e/sharing.py)
#   DM_TEST_NICE=0        the other lane at the e2e lane's CPU priority
#   DM_TEST_DURATIONS=N   list the N slowest tests of each run (15; 0: every test over a second)
set -uo pipefail
cd "$(dirname "$0")/.."
cache=${DM_TESTBED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dm-testbed}
export PATH=$cache/kubernetes-v1.20.2/bin:$PATH
.venv/bin/ruff check . || exit 1
# The suite starts hundreds of dm processes (brokers, controllers, the CLI), each importing about 150 of
# dm's modules. Where the environment sets PYTHONDONTWRITEBYTECODE (this machine does), Python reads
# compiled modules but never writes them, so each start compiled dm's sources again: 0.4 s of CPU. Compiled
# once here (only what changed since the last run), they are read by every process.
.venv/bin/python -m compileall -q -j 0 broker operator connectors testbed bench tests || exit 1
log=$(mktemp)
trap 'rm -f "$log"' EXIT

kube=0
if docker info >/dev/null 2>&1 || { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; }; then
  kube=1
  if ! bash scripts/kind/engine.sh || ! bash scripts/kind/images.sh || ! bash scripts/kind/install-kind.sh; then
    echo "run-tests: this machine can run the Kubernetes tests, but setting them up failed (see above)" >&2
    exit 1
  fi
  export DM_E2E_REQUIRED=1 DM_IMAGE_REQUIRED=1
fi
[ -x "$cache/kubernetes-v1.20.2/bin/kube-apiserver" ] && export DM_APISERVER_REQUIRED=1
workers=(-n "${DM_TEST_WORKERS:-2}" --dist loadfile)  # for everything but e2e
# e2e scenarios side by side: most of their time is waiting on pods (docs/testing.md)
e2e_workers=(-n "${DM_E2E_WORKERS:-2}" --dist loadgroup)

cluster_up() {
  if [ "${DM_KIND_KEEP:-0}" != 1 ] && kind get clusters 2>/dev/null | grep -qx "${DM_KIND_CLUSTER:-dm-e2e}"; then
    echo "run-tests: deleting the kind cluster an earlier run left"
    bash scripts/kind/cluster.sh down
  fi
  local start=$SECONDS
  bash scripts/kind/cluster.sh up || return 1
  echo "run-tests: kind cluster ready in $((SECONDS - start)) s"
}
cluster_down() {
  [ "${DM_KIND_KEEP:-0}" = 1 ] || bash scripts/kind/cluster.sh down
}
niced=  # a pytest run beside the e2e lane is given its nice value for that call
pytest() {  # one pytest run; its exit code (5, no tests collected, is a failure)
  ${niced:+nice -n "$niced"} .venv/bin/python -m pytest -q -rsR --durations="${DM_TEST_DURATIONS:-15}" --durations-min=1 -p no:cacheprovider \
    "$@" 2>&1 | tee -a "$log"
  local rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 5 ]; then
    echo "run-tests: pytest collected no tests ($*)" >&2
    return 1
  fi
  return "$rc"
}

if [ $# -gt 0 ]; then
  if [ $kube = 1 ]; then cluster_up || exit 1; fi
  pytest "$@"
  rc=$?
  [ $kube = 1 ] && cluster_down
elif [ $kube = 1 ] && [ "${DM_TEST_SERIAL:-0}" != 1 ]; then
  e2e_out=$(mktemp)
  (
    if cluster_up; then
      pytest tests/e2e "${e2e_workers[@]}"
      echo $? >"$e2e_out.rc"
      cluster_down
    else
      echo "run-tests: creating the kind cluster failed (see above)"
      echo 1 >"$e2e_out.rc"
    fi
  ) >"$e2e_out" 2>&1 &
  e2e=$!
  echo "run-tests: the e2e suite runs on kind beside the rest (its output follows theirs)"
  niced=${DM_TEST_NICE:-10} pytest --ignore=tests/e2e "${workers[@]}"
  rc=$?
  wait $e2e
  echo
  echo "run-tests: ---- the e2e suite on kind ----"
  cat "$e2e_out"
  rc2=$(cat "$e2e_out.rc" 2>/dev/null || echo 1)
  rm -f "$e2e_out" "$e2e_out.rc"
  [ "$rc" -eq 0 ] && rc=$rc2
else
  pytest --ignore=tests/e2e "${workers[@]}"
  rc=$?
  if [ $kube = 1 ]; then
    if cluster_up; then
      pytest tests/e2e "${e2e_workers[@]}"
      rc2=$?
      cluster_down
    else
      echo "run-tests: creating the kind cluster failed (see above)" >&2
      rc2=1
    fi
  else
    pytest tests/e2e  # skips with its reason, and is listed below
    rc2=$?
  fi
  [ "$rc" -eq 0 ] && rc=$rc2
fi
skipped=$(grep -E '^SKIPPED .*tests/(e2e|image|apiserver)/' "$log" || true)
if [ -n "$skipped" ]; then
  echo
  echo "run-tests: *** Kubernetes, image or API server tests were SKIPPED: this run has not tested them ***"
  echo "$skipped"
fi
exit "$rc"
