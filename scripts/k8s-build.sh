#!/usr/bin/env bash
# Builds the Kubernetes control plane the testbed runs (kube-apiserver, kube-controller-manager,
# kube-scheduler v1.20.2) from Debian's `kubernetes` source package with Debian's Go, offline, and
# caches the binaries with a matching kubectl outside the repository. Only the first run builds;
# later runs find the cache and exit at once. See docs/testing.md.
#
#   DM_TESTBED_CACHE   cache root (default ${XDG_CACHE_HOME:-~/.cache}/dm-testbed)
#   DM_K8S_BUILD_JOBS  parallel Go build jobs (default: number of cores)
set -euo pipefail

version=v1.20.2
deb_version=1.20.5+really1.20.2
cache=${DM_TESTBED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dm-testbed}
bin=$cache/kubernetes-$version/bin
wanted=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kubeadm kube-proxy)

have_all() { for b in "${wanted[@]}"; do [ -x "$bin/$b" ] || return 1; done; }
if have_all; then
  echo "k8s-build: cached in $bin"
  exit 0
fi

# What the build and the testbed need from Debian. etcd-server and iproute2 are run by the testbed,
# rsync and make drive the Makefile, the reflect2 sources replace a vendored copy that faults with Go >= 1.18 (see below).
packages=(golang-go etcd-server iproute2 golang-github-modern-go-reflect2-dev dpkg-dev rsync make)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "k8s-build: missing Debian packages: ${missing[*]} (install them as root: apt-get install ${missing[*]})" >&2
    exit 1
  fi
  echo "k8s-build: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

work=$cache/build
rm -rf "$work"
mkdir -p "$work/apt/sources.list.d" "$work/apt/lists/partial" "$bin"
start=$(date +%s)

# The source package comes from the mirror the machine already uses, through a private apt
# configuration with a deb-src entry, so the system's apt sources stay untouched.
sources=/etc/apt/sources.list.d/debian.sources
if [ -f "$sources" ]; then
  sed 's/^Types: deb$/Types: deb-src/' "$sources" > "$work/apt/sources.list.d/debian-src.sources"
else
  mirror=$(grep -h '^deb ' /etc/apt/sources.list 2>/dev/null | head -1 | awk '{print $2}')
  echo "deb-src ${mirror:-http://deb.debian.org/debian} bookworm main" > "$work/apt/sources.list.d/debian-src.list"
fi
apt_opts=(-o "Dir::Etc::sourcelist=/dev/null" -o "Dir::Etc::sourceparts=$work/apt/sources.list.d"
          -o "Dir::State::Lists=$work/apt/lists" -o "APT::Get::List-Cleanup=0")
# apt drops to the _apt user for downloads, which cannot write into a root-owned cache.
[ "$(id -u)" = 0 ] && apt_opts+=(-o "APT::Sandbox::User=root")
echo "k8s-build: fetching the kubernetes $deb_version source package"
apt-get "${apt_opts[@]}" update -qq >/dev/null
(cd "$work" && apt-get "${apt_opts[@]}" source --download-only -qq kubernetes >/dev/null)
(cd "$work" && dpkg-source --no-check -x kubernetes_*.dsc src >/dev/null)

# The trap: vendored github.com/modern-go/reflect2 v1.0.1 faults ("fatal error: fault") on the first
# custom-object create when built with Go >= 1.18. Debian packages v1.0.2, which fixes it.
reflect2=$work/src/vendor/github.com/modern-go/reflect2
rm -rf "$reflect2"
cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 "$reflect2"
rm -f "$reflect2/go.mod" "$reflect2/go.sum"

# The Makefile generates the OpenAPI definitions before compiling; a plain `go build` does not.
echo "k8s-build: compiling (a first build takes about 6 minutes on 2 cores; log: $work/build.log)"
export GOPROXY=off GOFLAGS=-mod=vendor GOCACHE=$cache/go-build GOPATH=$work/gopath
export KUBE_GIT_VERSION=$version KUBE_GIT_MAJOR=1 KUBE_GIT_MINOR=20 KUBE_GIT_TREE_STATE=clean
export KUBE_GIT_COMMIT=faecb196815e248d3ecfb03c680a4507229c2a56
export GOMAXPROCS=${DM_K8S_BUILD_JOBS:-$(nproc)}
if ! (cd "$work/src" && make WHAT="${wanted[*]/#/cmd/}" \
      >"$work/build.log" 2>&1); then
  tail -40 "$work/build.log" >&2
  echo "k8s-build: build failed; full log in $work/build.log" >&2
  exit 1
fi
for b in "${wanted[@]}"; do
  install -m 0755 "$work/src/_output/bin/$b" "$bin/$b"
done
"$bin/kube-apiserver" --version
rm -rf "$work"
echo "k8s-build: built in $(( $(date +%s) - start )) s, cached in $bin"
