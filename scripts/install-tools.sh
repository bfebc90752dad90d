#!/usr/bin/env bash
# Installs the non-Python tools the test suite talks to: kcat, a Java runtime for Spark, promtool, and the
# Kubernetes control plane for the e2e suite (scripts/k8s-build.sh: built once, then cached) with
# helm (scripts/helm-install.sh).
# kcat and Java are best effort (their tests skip with a reason when missing). The control plane is
# not: on a machine that can build it (root with apt-get), a failed build fails `make test` rather
# than letting the e2e suite skip unnoticed.
set -u
cd "$(dirname "$0")/.."
need=()
command -v kcat >/dev/null 2>&1 || need+=(kcat)
# Spark 4 runs on Java 17 or 21.
if ! command -v java >/dev/null 2>&1 && [ -z "${JAVA_HOME:-}" ]; then need+=(openjdk-17-jre-headless); fi
can_apt=0
[ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && can_apt=1
if [ ${#need[@]} -gt 0 ]; then
  if [ $can_apt = 1 ]; then
    echo "install-tools: installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null 2>&1 || true
    apt-get install -y -qq "${need[@]}" >/dev/null 2>&1 || echo "install-tools: apt-get install ${need[*]} failed; dependent tests will skip" >&2
  else
    echo "install-tools: cannot install ${need[*]} (needs root and apt-get); dependent tests will skip" >&2
  fi
fi
# promtool (Debian's prometheus package) unit-tests the alert rules in deploy/prometheus; its
# recommendations (exporters, the web console) are not needed.
if ! command -v promtool >/dev/null 2>&1; then
  if [ $can_apt = 1 ]; then
    echo "install-tools: installing prometheus (for promtool)"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get install -y -qq --no-install-recommends prometheus >/dev/null 2>&1 \
      || { apt-get update -qq >/dev/null 2>&1; apt-get install -y -qq --no-install-recommends prometheus >/dev/null 2>&1; }; } \
      || echo "install-tools: apt-get install prometheus failed; the alert rule tests will fail" >&2
  else
    echo "install-tools: cannot install prometheus (needs root and apt-get); the alert rule tests will skip" >&2
  fi
fi
if ! bash scripts/k8s-build.sh || ! bash scripts/helm-install.sh; then
  if [ $can_apt = 1 ]; then
    echo "install-tools: building the Kubernetes control plane failed (see above)" >&2
    exit 1
  fi
  echo "install-tools: no Kubernetes control plane; the e2e tests will skip" >&2
fi
exit 0
