#!/usr/bin/env bash
# Runs lint and the whole suite (`make test`). Where a Docker engine answers, or can be started (root
# with apt-get: scripts/kind/engine.sh installs and starts one), the Kubernetes half runs for real: the
# dm image is built, a kind cluster is created with it (scripts/kind/cluster.sh) and the e2e suite runs
# on it; a failure to set that up fails the run, and the e2e and image tests then fail rather than skip
# (DM_E2E_REQUIRED, DM_IMAGE_REQUIRED). Skip reasons are printed (-rs), and a run in which Kubernetes
# tests skipped says so at the end. pytest's "no tests collected" (exit 5) is a failure.
#   DM_KIND_KEEP=1  keep the kind cluster afterwards, and reuse a kept one
set -uo pipefail
cd "$(dirname "$0")/.."
cache=${DM_TESTBED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dm-testbed}
export PATH=$cache/kubernetes-v1.20.2/bin:$PATH
.venv/bin/ruff check . || exit 1

kind_cluster=0
if docker info >/dev/null 2>&1 || { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; }; then
  start=$SECONDS
  if [ "${DM_KIND_KEEP:-0}" != 1 ] && kind get clusters 2>/dev/null | grep -qx "${DM_KIND_CLUSTER:-dm-e2e}"; then
    echo "run-tests: deleting the kind cluster an earlier run left"
    bash scripts/kind/cluster.sh down
  fi
  if bash scripts/kind/engine.sh && bash scripts/kind/images.sh && bash scripts/kind/install-kind.sh \
     && bash scripts/kind/cluster.sh up; then
    kind_cluster=1
    export DM_E2E_REQUIRED=1 DM_IMAGE_REQUIRED=1
    echo "run-tests: image and kind cluster ready in $((SECONDS - start)) s"
  else
    echo "run-tests: this machine can run the Kubernetes tests, but setting them up failed (see above)" >&2
    exit 1
  fi
fi
[ -x "$cache/kubernetes-v1.20.2/bin/kube-apiserver" ] && export DM_APISERVER_REQUIRED=1

log=$(mktemp)
.venv/bin/python -m pytest -q -rs -p no:cacheprovider "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
if [ $kind_cluster = 1 ] && [ "${DM_KIND_KEEP:-0}" != 1 ]; then
  bash scripts/kind/cluster.sh down
fi
skipped=$(grep -E '^SKIPPED .*tests/(e2e|image|apiserver)/' "$log" || true)
if [ -n "$skipped" ]; then
  echo
  echo "run-tests: *** Kubernetes, image or API server tests were SKIPPED: this run has not tested them ***"
  echo "$skipped"
fi
rm -f "$log"
if [ "$rc" -eq 5 ]; then
  echo "run-tests: pytest collected no tests" >&2
  exit 1
fi
exit "$rc"
