#!/usr/bin/env bash
# Builds dm's kind node image on a machine with no container registry (docs/testing.md, ADR 0016):
#   - the control plane images kubeadm runs (kube-apiserver, kube-controller-manager, kube-scheduler,
#     kube-proxy v1.20.2 from scripts/k8s-build.sh; Debian's etcd; Debian's catatonit as the pause
#     image) and the add-ons that stand in for CoreDNS, kindnetd and the local-path provisioner
#     (testbed/dm_testbed/addons), all FROM bases made offline by scripts/kind/images.sh;
#   - the node (testbed/kind/node/Dockerfile: Debian's systemd, containerd, runc, CNI plugins, with
#     kubelet, kubeadm and kubectl), with those images preloaded into its containerd, as kind's own
#     `kind build node-image` does.
# The node image's tag is a hash of everything that goes into it, so an unchanged input costs nothing
# and a changed one builds a new image. Prints the image's name on its last line.
#   DM_TESTBED_CACHE  cache root (default ${XDG_CACHE_HOME:-~/.cache}/dm-testbed)
set -euo pipefail
cd "$(dirname "$0")/../.."
version=v1.20.2
cache=${DM_TESTBED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dm-testbed}
bin=$cache/kubernetes-$version/bin
minbase=dm.local/debian:bookworm-minbase
python_base=$(awk '/^FROM / {print $2; exit}' Dockerfile)
export DOCKER_BUILDKIT=0
components=(kube-apiserver kube-controller-manager kube-scheduler)
binaries=("${components[@]}" kube-proxy kubelet kubeadm kubectl)
for b in "${binaries[@]}"; do
  [ -x "$bin/$b" ] || { echo "node-image: $bin/$b is missing (scripts/k8s-build.sh builds it)" >&2; exit 1; }
done

hash=$( (sha256sum "${binaries[@]/#/$bin/}" | cut -d' ' -f1
         find testbed/kind testbed/dm_testbed -type f ! -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum
         docker image inspect -f '{{.Id}}' "$minbase" "$python_base") | sha256sum | cut -c1-12)
node=dm.local/kind-node:$version-$hash
if docker image inspect "$node" >/dev/null 2>&1; then
  echo "node-image: cached"
  echo "$node"
  exit 0
fi
start=$SECONDS
work=$(mktemp -d)
trap 'rm -rf "$work"; docker rm -f "dm-node-build-$$" >/dev/null 2>&1 || true' EXIT

build() {  # build <tag> <dockerfile> <context> [build args...]: quiet unless it fails
  local tag=$1 file=$2 ctx=$3
  shift 3
  if ! docker build -q -t "$tag" -f "$file" "$@" "$ctx" >"$work/build.log" 2>&1; then
    tail -30 "$work/build.log" >&2
    echo "node-image: building $tag failed" >&2
    exit 1
  fi
}

images=()
for c in "${components[@]}"; do
  mkdir -p "$work/$c" && cp "$bin/$c" "$work/$c/"
  build "dm.local/$c:$version" testbed/kind/images/component.Dockerfile "$work/$c" --build-arg "BINARY=$c"
  images+=("dm.local/$c:$version")
done
mkdir -p "$work/kube-proxy" && cp "$bin/kube-proxy" testbed/kind/node/files/usr/local/bin/select-iptables-mode "$work/kube-proxy/"
build "dm.local/kube-proxy:$version" testbed/kind/images/kube-proxy.Dockerfile "$work/kube-proxy"
mkdir -p "$work/empty"
build dm.local/etcd:bookworm testbed/kind/images/etcd.Dockerfile "$work/empty"
build dm.local/pause:catatonit testbed/kind/images/pause.Dockerfile "$work/empty"
mkdir -p "$work/addons" && cp -r testbed/dm_testbed "$work/addons/" && find "$work/addons" -name __pycache__ -prune -exec rm -rf {} +
build dm.local/kind-addons:dev testbed/kind/images/addons.Dockerfile "$work/addons" --build-arg "BASE=$python_base"
docker tag dm.local/kind-addons:dev dm.local/coredns:dm-dns
images+=("dm.local/kube-proxy:$version" dm.local/etcd:bookworm dm.local/pause:catatonit dm.local/kind-addons:dev
         dm.local/coredns:dm-dns)
echo "node-image: component images built in $((SECONDS - start)) s"

cp -r testbed/kind/node "$work/node" && mkdir -p "$work/node/bin"
cp "$bin/kubelet" "$bin/kubeadm" "$bin/kubectl" "$work/node/bin/"
build dm.local/kind-node-base:build "$work/node/Dockerfile" "$work/node"

# Preload: the images go into the node's containerd content store (not unpacked: that happens on the
# node, whose /var is a volume), then the container is committed as the node image.
builder=dm-node-build-$$
docker run -d --name "$builder" --entrypoint sleep dm.local/kind-node-base:build infinity >/dev/null
docker exec "$builder" bash -c 'nohup containerd >/var/log/containerd-build.log 2>&1 &
  for _ in $(seq 50); do [ -S /run/containerd/containerd.sock ] && break; sleep 0.2; done; ctr version >/dev/null'
docker save "${images[@]}" | docker exec -i "$builder" ctr --namespace=k8s.io images import --all-platforms \
  --no-unpack --digests - >/dev/null
docker exec "$builder" bash -c 'ctr --namespace=k8s.io images list -q' >"$work/imported"
for i in "${images[@]}"; do
  grep -q "$i\$" "$work/imported" || { echo "node-image: $i is missing from the node's containerd" >&2; exit 1; }
done
docker exec "$builder" bash -c 'pkill containerd; rm -rf /var/log/containerd-build.log /run/containerd'
docker commit --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' --change 'CMD []' \
  "$builder" "$node" >/dev/null
size=$(docker image inspect -f '{{.Size}}' "$node")
echo "node-image: built in $((SECONDS - start)) s, $((size / 1000000)) MB"
echo "$node"
