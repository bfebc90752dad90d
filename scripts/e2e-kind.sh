#!/usr/bin/env bash
# The Kubernetes half of the suite alone (`make e2e-kind`, and what the hosted CI workflow runs): builds
# the dm image, creates the kind cluster unless one exists, and runs tests/e2e and tests/image against
# them. On a machine with Docker Hub set DM_KIND_NODE_IMAGE=default to use kind's own node image;
# without, dm's offline node image is built (scripts/kind/node-image.sh).
#   DM_KIND_CLUSTER (default dm-e2e)  DM_IMAGE (default dm:e2e)  DM_KIND_KEEP=1 keeps the cluster
set -uo pipefail
cd "$(dirname "$0")/.."
cache=${DM_TESTBED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dm-testbed}
export PATH=$cache/kubernetes-v1.20.2/bin:$PATH
set -e
bash scripts/kind/engine.sh
bash scripts/kind/images.sh
bash scripts/kind/install-kind.sh
created=0
kind get clusters 2>/dev/null | grep -qx "${DM_KIND_CLUSTER:-dm-e2e}" || created=1
bash scripts/kind/cluster.sh up
set +e
DM_E2E_REQUIRED=1 DM_IMAGE_REQUIRED=1 .venv/bin/python -m pytest tests/e2e tests/image -rs -p no:cacheprovider "$@"
rc=$?
if [ $created = 1 ] && [ "${DM_KIND_KEEP:-0}" != 1 ]; then
  bash scripts/kind/cluster.sh down
fi
[ $rc = 5 ] && { echo "e2e-kind: pytest collected no tests" >&2; exit 1; }
exit $rc
