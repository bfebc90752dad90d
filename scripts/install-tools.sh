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
# Kafka clients written in JavaScript, from the npm registry, pinned (the test module named with each says
# which version), cached with the other test tools: KafkaJS and @platformatic/kafka.
install_npm_pinned() {  # package, version, directory
  if command -v npm >/dev/null 2>&1 && \
     ! grep -qs "\"version\": \"$2\"" "$3/node_modules/$1/package.json"; then
    echo "install-tools: installing $1@$2 into $3"
    mkdir -p "$3"
    [ -f "$3/package.json" ] || echo '{"name": "dm-test-tools", "private": true}' > "$3/package.json"
    (cd "$3" && npm install --no-audit --no-fund --silent --engine-strict=false "$1@$2" >/dev/null 2>&1) \
      || echo "install-tools: npm install $1 failed; the tests with it will skip" >&2
  fi
}
install_npm_pinned kafkajs "$(sed -n 's/^KAFKAJS_VERSION = "\(.*\)".*/\1/p' tests/kafkajs.py)" \
  "${DM_KAFKAJS_DIR:-$HOME/.cache/dm-testbed/kafkajs}"
install_npm_pinned @platformatic/kafka "$(sed -n 's/^PLATFORMATIC_VERSION = "\(.*\)".*/\1/p' tests/platformatic.py)" \
  "${DM_PLATFORMATIC_DIR:-$HOME/.cache/dm-testbed/platformatic-kafka}"
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
