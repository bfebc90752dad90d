#!/usr/bin/env bash
# Runs lint and the whole suite. pytest exits 5 when it collects no tests; that is a failure
# of the suite layout, not a pass, so it is reported as such.
set -uo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check . || exit 1
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
rc=$?
if [ $rc -eq 5 ]; then
  echo "run-tests: pytest collected no tests" >&2
  exit 1
fi
exit $rc
