# Two commands do all set-up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install run test lint bench clean tools

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,bench,spark]'
	touch $(STAMP)

install: $(STAMP)

# Test tools that are not Python packages (kcat, Java for Spark); skipped tests say so when missing.
tools:
	bash scripts/install-tools.sh

# A local cluster: a controller and 3 brokers (Kafka on 127.0.0.1:9092-9094), data in ./data.
run: install
	$(BIN)/dm up --brokers 3 --data-dir ./data --port 9092 --http-port 8080

test: install tools
	bash scripts/run-tests.sh

lint: install
	$(BIN)/ruff check .

bench: install
	$(BIN)/python -m bench.run_all

clean:
	rm -rf $(VENV) data .pytest_cache
