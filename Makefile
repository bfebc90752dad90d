# Two commands do all set-up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
RUN_STAMP := $(VENV)/.run-stamp
TEST_STAMP := $(VENV)/.test-stamp
TESTBED := PYTHONPATH=testbed $(BIN)/python -m dm_testbed

.PHONY: install install-test run test lint bench dashboards clean tools k8s-build k8s-up k8s-down wheel image e2e-kind kind-up kind-down

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# What running dm needs (brokers, controller, operator, CLI).
$(RUN_STAMP): pyproject.toml | $(VENV)/bin/python
	$(BIN)/python -m pip install --quiet -e .
	touch $(RUN_STAMP)

# Everything the suite, the benchmarks and the Spark connector need on top.
$(TEST_STAMP): pyproject.toml | $(VENV)/bin/python
	$(BIN)/python -m pip install --quiet -e '.[test,bench,spark]'
	touch $(RUN_STAMP) $(TEST_STAMP)

install: $(RUN_STAMP)

install-test: $(TEST_STAMP)

# Tools that are not Python packages: kcat, Java for Spark, and the Kubernetes binaries (built once
# from Debian's source package, cached under ~/.cache/dm-testbed) with helm. The Docker engine, the
# images and the kind cluster are set up by scripts/run-tests.sh (scripts/kind/).
tools:
	bash scripts/install-tools.sh

# A local cluster: a controller and 3 brokers (Kafka on 127.0.0.1:9092-9094), data in ./data.
run: install
	$(BIN)/dm up --brokers 3 --data-dir ./data --port 9092 --http-port 8080

test: install-test tools
	bash scripts/run-tests.sh

lint: install-test
	$(BIN)/ruff check .

bench: install-test
	$(BIN)/python -m bench.run_all

# docs/dashboards/*.png: the Grafana dashboards drawn from a local cluster and a local Prometheus
# (Debian's prometheus package, which `make tools` installs), about 5 minutes.
dashboards: install-test
	$(BIN)/python -m bench.dashboards

# The control plane alone (etcd, kube-apiserver, kube-controller-manager as local processes) that the
# tests in tests/apiserver use, for manual use (docs/testing.md).
k8s-build:
	bash scripts/k8s-build.sh
	bash scripts/helm-install.sh

k8s-up: install-test k8s-build
	$(TESTBED) up

k8s-down: install-test
	$(TESTBED) down

# The wheel the image installs (the Dockerfile builds the same one from the same pyproject.toml).
wheel: install-test
	$(BIN)/python -m pip wheel --quiet --no-deps -w dist .

# The container image (scripts/kind/engine.sh starts a Docker engine where none runs), a kind cluster
# with it loaded (kept until kind-down), and the e2e suite on kind alone.
image:
	bash scripts/kind/engine.sh
	DM_IMAGE=dm:dev bash scripts/kind/images.sh

kind-up: install-test k8s-build
	bash scripts/kind/engine.sh
	bash scripts/kind/images.sh
	bash scripts/kind/install-kind.sh
	bash scripts/kind/cluster.sh up

kind-down:
	bash scripts/kind/cluster.sh down

e2e-kind: install-test
	bash scripts/e2e-kind.sh

clean:
	rm -rf $(VENV) data dist .pytest_cache
