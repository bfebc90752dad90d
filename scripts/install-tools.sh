#!/usr/bin/env bash
# Installs the non-Python tools the test suite talks to: kcat, a Java runtime for Spark, promtool, Node.js
# with KafkaJS (a client written in JavaScript, tests/kafkajs.py), and the
# Kubernetes control plane for the e2e suite (scripts/k8s-build.sh: built once, then cached) with
# helm (scripts/helm-install.sh).
# kcat, Java and KafkaJS are best effort (their tests skip with a reason when missing). The control plane is
# not: on a machine that can build it (root with apt-get), a failed build fails `make test` rather
# than letting the e2e suite skip unnoticed.
set -u
cd "$(dirname "$0")/.."
need=()
command -v kcat >/dev/null 2>&1 || need+=(kcat)
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
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
# KafkaJS from the npm registry, pinned (tests/kafkajs.py names the version), cached with the other test tools.
kafkajs_version=$(sed -n 's/^KAFKAJS_VERSION = "\(.*\)".*/\1/p' tests/kafkajs.py)
kafkajs_dir=${DM_KAFKAJS_DIR:-$HOME/.cache/dm-testbed/kafkajs}
if command -v npm >/dev/null 2>&1 && \
   ! grep -qs "\"version\": \"$kafkajs_version\"" "$kafkajs_dir/node_modules/kafkajs/package.json"; then
  echo "install-tools: installing kafkajs@$kafkajs_version into $kafkajs_dir"
  mkdir -p "$kafkajs_dir"
  [ -f "$kafkajs_dir/package.json" ] || echo '{"name": "dm-test-tools", "private": true}' > "$kafkajs_dir/package.json"
  (cd "$kafkajs_dir" && npm install --no-audit --no-fund --silent "kafkajs@$kafkajs_version" >/dev/null 2>&1) \
    || echo "install-tools: npm install kafkajs failed; the KafkaJS tests will skip" >&2
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
