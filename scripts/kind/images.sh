#!/usr/bin/env bash
# Builds the dm image (the project's Dockerfile, unchanged) with the Docker engine, and the Python base
# it builds FROM when no registry serves that: on a machine with Docker Hub the base is pulled; without
# one (this VM's kind) a stand-in with the same name is built from Debian bookworm's python3 3.11 on a
# base made offline with mmdebstrap. The stand-in carries the host's CA bundle for pip (PIP_CERT),
# since egress TLS here is intercepted by a CA only the host trusts. Layer caching makes a rebuild of
# unchanged sources take seconds.
#   DM_IMAGE          the tag to build (default dm:e2e)
#   DM_TESTBED_CACHE  cache root (default ${XDG_CACHE_HOME:-~/.cache}/dm-testbed)
set -euo pipefail
cd "$(dirname "$0")/../.."
image=${DM_IMAGE:-dm:e2e}
python_base=$(awk '/^FROM / {print $2; exit}' Dockerfile)
minbase=dm.local/debian:bookworm-minbase
cache=${DM_TESTBED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dm-testbed}
export DOCKER_BUILDKIT=0  # the legacy builder: Debian's docker.io has no buildx
has_image() { docker image inspect "$1" >/dev/null 2>&1; }
build() {  # docker build, quiet unless it fails
  local log
  log=$(mktemp)
  if ! docker build -q "$@" >"$log" 2>&1; then
    tail -30 "$log" >&2
    rm -f "$log"
    echo "images: docker build $* failed" >&2
    return 1
  fi
  rm -f "$log"
}

# A Debian bookworm base made from the Debian mirror alone.
ensure_minbase() {
  has_image "$minbase" && return 0
  command -v mmdebstrap >/dev/null || {
    [ "$(id -u)" = 0 ] || { echo "images: mmdebstrap is missing (apt-get install mmdebstrap)" >&2; return 1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
  }
  local mirror=http://deb.debian.org/debian tar
  [ -f /etc/apt/sources.list.d/debian.sources ] && \
    mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
  tar=$(mktemp -d)/rootfs.tar
  echo "images: building $minbase with mmdebstrap from $mirror"
  local start=$SECONDS
  mmdebstrap --variant=minbase --quiet bookworm "$tar" "deb $mirror bookworm main" \
    "deb $mirror bookworm-updates main" "deb ${mirror%/debian}/debian-security bookworm-security main"
  docker import -c 'CMD ["bash"]' -c 'ENV LANG=C.UTF-8' "$tar" "$minbase" >/dev/null
  rm -rf "$(dirname "$tar")"
  echo "images: $minbase in $((SECONDS - start)) s"
}

ensure_python_base() {
  has_image "$python_base" && return 0
  if docker pull "$python_base" >/dev/null 2>&1; then
    echo "images: pulled $python_base"
    return 0
  fi
  echo "images: no registry serves $python_base; building a stand-in from Debian bookworm's python3"
  ensure_minbase
  local ctx
  ctx=$(mktemp -d)
  cp /etc/ssl/certs/ca-certificates.crt "$ctx/host-ca-bundle.crt"
  cp testbed/kind/images/python-standin.Dockerfile "$ctx/Dockerfile"
  build --build-arg "BASE=$minbase" -t "$python_base" "$ctx"
  rm -rf "$ctx"
}

# An image of the e2e suite built FROM Debian bookworm (debian:bookworm-slim where a registry serves it,
# else the offline base), rebuilt when its Dockerfile changes (the hash is a label of the image).
ensure_debian_image() {
  local tag=$1 dockerfile=$2 base=debian:bookworm-slim digest
  digest=$(sha256sum "$dockerfile" | cut -c1-16)
  [ "$(docker image inspect -f '{{index .Config.Labels "dev.dm.dockerfile"}}' "$tag" 2>/dev/null)" = "$digest" ] \
    && return 0
  if ! has_image "$base" && ! docker pull "$base" >/dev/null 2>&1; then
    ensure_minbase
    base=$minbase
  fi
  local start=$SECONDS
  build --build-arg "BASE=$base" --label "dev.dm.dockerfile=$digest" -t "$tag" -f "$dockerfile" \
    testbed/kind/images
  echo "images: $tag built from $base in $((SECONDS - start)) s"
}

ensure_python_base
# the HTTP client pods: curl and jq (tests/e2e/test_http.py)
ensure_debian_image "${DM_CURL_IMAGE:-dm.local/curl:e2e}" testbed/kind/images/curl.Dockerfile
# the e2e suite's Prometheus: Debian's prometheus package (tests/e2e/test_monitoring.py)
ensure_debian_image "${DM_PROMETHEUS_IMAGE:-dm.local/prometheus:e2e}" testbed/kind/images/prometheus.Dockerfile
start=$SECONDS
build -t "$image" .
size=$(docker image inspect -f '{{.Size}}' "$image")
echo "images: $image built in $((SECONDS - start)) s, $((size / 1000000)) MB"
