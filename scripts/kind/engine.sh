#!/usr/bin/env bash
# A running Docker engine for the image and kind tests. Where one answers (`docker info`), nothing is
# done: a hosted CI runner, a developer's Docker Desktop. Otherwise, as root on Debian: Debian's
# docker.io is installed if missing and dockerd started in the background (log and pid under the
# cache), with a runc wrapper as its default runtime where the kernel's capability bounding set lacks
# CAP_SYS_RESOURCE (see runc-without-sys-resource). Exits non-zero, saying why, when no engine can run.
#   DM_TESTBED_CACHE   cache root (default ${XDG_CACHE_HOME:-~/.cache}/dm-testbed)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${DM_TESTBED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dm-testbed}
state=$cache/docker
docker info >/dev/null 2>&1 && exit 0

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "engine: no Docker engine answers, and starting one needs root on Debian (apt-get)" >&2
  exit 1
fi
need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v jq >/dev/null || need+=(jq)
command -v docker >/dev/null || need+=(docker-cli)
if [ ${#need[@]} -gt 0 ]; then
  echo "engine: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
mkdir -p "$state" /lib/modules  # kind mounts /lib/modules into its nodes; this kernel has no modules

args=(--host=unix:///var/run/docker.sock --exec-root=/var/run/docker --data-root=/var/lib/docker
      --pidfile="$state/dockerd.pid" --storage-driver=overlay2)
# Bit 24 of the bounding set is CAP_SYS_RESOURCE.
bounding=$(awk '/^CapBnd/ {print $2}' /proc/self/status)
if (( (16#$bounding >> 24 & 1) == 0 )); then
  install -m 0755 "$here/runc-without-sys-resource" "$state/runc-without-sys-resource"
  args+=(--add-runtime "runc-without-sys-resource=$state/runc-without-sys-resource"
         --default-runtime runc-without-sys-resource)
fi
echo "engine: starting dockerd (log: $state/dockerd.log)"
# setsid: the engine outlives this script and the shell that ran it, and ignores their signals.
setsid dockerd "${args[@]}" >>"$state/dockerd.log" 2>&1 < /dev/null &
for _ in $(seq 120); do
  docker info >/dev/null 2>&1 && { echo "engine: ready ($(docker version -f '{{.Server.Version}}'))"; exit 0; }
  sleep 0.5
done
tail -20 "$state/dockerd.log" >&2
echo "engine: dockerd did not answer within 60 s" >&2
exit 1
