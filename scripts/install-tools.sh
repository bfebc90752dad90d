#!/usr/bin/env bash
# Installs the non-Python tools the test suite talks to: kcat, and a Java runtime for Spark.
# Best effort: tests that need a missing tool skip with a reason instead of failing.
set -u
need=()
command -v kcat >/dev/null 2>&1 || need+=(kcat)
# Spark 4 runs on Java 17 or 21.
if ! command -v java >/dev/null 2>&1 && [ -z "${JAVA_HOME:-}" ]; then need+=(openjdk-17-jre-headless); fi
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "install-tools: cannot install ${need[*]} (needs root and apt-get); dependent tests will skip" >&2
  exit 0
fi
echo "install-tools: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null 2>&1 || true
apt-get install -y -qq "${need[@]}" >/dev/null 2>&1 || echo "install-tools: apt-get install ${need[*]} failed; dependent tests will skip" >&2
exit 0
