#!/usr/bin/env bash
# The e2e suite's kind cluster: `cluster.sh up` creates it (one control plane, three workers in three
# zones: tests/e2e/kind.yaml) unless it exists, waits for every node to be Ready and loads the dm image
# into it with `kind load docker-image`; `cluster.sh down` deletes it.
# The node image is dm's offline one (scripts/kind/node-image.sh, with the kubeadm settings that point
# kubeadm at its images: testbed/kind/kubeadm-offline.yaml), or with DM_KIND_NODE_IMAGE=default kind's
# own default node image (a machine with Docker Hub, e.g. the hosted CI runner), or any image named there.
#   DM_KIND_CLUSTER (default dm-e2e)   DM_IMAGE (default dm:e2e)   DM_CURL_IMAGE (default dm.local/curl:e2e)
#   DM_PROMETHEUS_IMAGE (default dm.local/prometheus:e2e)
#   DM_TESTBED_CACHE (tool cache root)
set -euo pipefail
cd "$(dirname "$0")/../.."
cluster=${DM_KIND_CLUSTER:-dm-e2e}
image=${DM_IMAGE:-dm:e2e}
cache=${DM_TESTBED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dm-testbed}
export PATH=$cache/kubernetes-v1.20.2/bin:$PATH

case "${1:-}" in
  down)
    kind delete cluster --name "$cluster"
    exit 0 ;;
  up) ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac

if kind get clusters 2>/dev/null | grep -qx "$cluster"; then
  echo "cluster: $cluster exists; loading $image"
else
  config=$(mktemp)
  trap 'rm -f "$config"' EXIT
  node_args=()
  case "${DM_KIND_NODE_IMAGE:-}" in
    "") node=$(bash scripts/kind/node-image.sh | tail -1)
        node_args=(--image "$node")
        cat tests/e2e/kind.yaml testbed/kind/kubeadm-offline.yaml >"$config" ;;
    default) cp tests/e2e/kind.yaml "$config" ;;
    *) node_args=(--image "$DM_KIND_NODE_IMAGE"); cp tests/e2e/kind.yaml "$config" ;;
  esac
  start=$SECONDS
  kind create cluster --name "$cluster" --config "$config" "${node_args[@]}" --retain
  kubectl --context "kind-$cluster" wait --for=condition=Ready nodes --all --timeout=300s
  kubectl --context "kind-$cluster" -n kube-system rollout status deployment/coredns --timeout=300s
  echo "cluster: $cluster ready in $((SECONDS - start)) s"
fi
start=$SECONDS
curl_image=${DM_CURL_IMAGE:-dm.local/curl:e2e}  # the HTTP client pods' (scripts/kind/images.sh)
prometheus_image=${DM_PROMETHEUS_IMAGE:-dm.local/prometheus:e2e}  # tests/e2e/test_monitoring.py's
kind load docker-image "$image" --name "$cluster"
# client pods and Prometheus run on the control plane (tests/e2e/dm.py: ON_CONTROL_PLANE)
kind load docker-image "$curl_image" "$prometheus_image" --name "$cluster" --nodes "$cluster-control-plane"
echo "cluster: $image, $curl_image and $prometheus_image loaded in $((SECONDS - start)) s"
