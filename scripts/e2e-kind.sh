#!/usr/bin/env bash
# The e2e suite on kind with the real image: creates the kind cluster (tests/e2e/kind.yaml) unless it
# exists, builds the image, loads it into the cluster and runs tests/e2e against it
# (DM_E2E_SUBSTRATE=kind). Only this set-up differs from the testbed runs. Without Docker or kind the
# tests are still collected and skip with the reason.
#   DM_KIND_CLUSTER  (default dm-e2e)   DM_KIND_IMAGE (default dm:e2e)   DM_KIND_KEEP=1 keeps the cluster
set -uo pipefail
cd "$(dirname "$0")/.."
cluster=${DM_KIND_CLUSTER:-dm-e2e}
image=${DM_KIND_IMAGE:-dm:e2e}
export DM_E2E_SUBSTRATE=kind DM_KIND_CLUSTER=$cluster DM_KIND_IMAGE=$image
ready=1
for tool in docker kind kubectl helm; do
  command -v "$tool" >/dev/null || { echo "e2e-kind: $tool is not installed; the kind tests will skip"; ready=0; }
done
if [ $ready = 1 ] && ! docker info >/dev/null 2>&1; then
  echo "e2e-kind: no Docker engine is running; the kind tests will skip"; ready=0
fi
created=0
if [ $ready = 1 ]; then
  set -e
  if ! kind get clusters | grep -qx "$cluster"; then
    kind create cluster --name "$cluster" --config tests/e2e/kind.yaml --wait 120s
    created=1
  fi
  docker build -t "$image" .
  kind load docker-image "$image" --name "$cluster"
  set +e
fi
.venv/bin/python -m pytest tests/e2e -rs -p no:cacheprovider "$@"
rc=$?
if [ $created = 1 ] && [ "${DM_KIND_KEEP:-0}" != 1 ]; then
  kind delete cluster --name "$cluster"
fi
[ $rc = 5 ] && { echo "e2e-kind: pytest collected no tests" >&2; exit 1; }
exit $rc
