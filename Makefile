# Set-up on a fresh machine is one command per use; each prints a line per step and
# pip's own progress:
#   make serve    - create .venv, install hightide alone (the broker and the operator
#                   commands: a few small dependencies), start a broker on 127.0.0.1:9092
#   make console  - add the console extra, start the web console on 127.0.0.1:8080
#   make spark    - add the Spark extra (PySpark, Arrow, pandas: ~0.6 GB; Java 17 to run it)
#   make test     - install every extra and the test tools (kcat, chromium, kafkajs, the
#                   client matrix's clients), run every test
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip install
STAMP  := $(VENV)/.installed
BASE_STAMP    := $(VENV)/.installed-base
CONSOLE_STAMP := $(VENV)/.installed-console
SPARK_STAMP   := $(VENV)/.installed-spark

.PHONY: serve console spark test venv lint bench clean jsdeps chromium clients

$(BIN)/python:
	@echo "==> creating $(VENV) (a virtual environment) with $(PYTHON)"
	$(PYTHON) -m venv $(VENV)
	@echo "==> upgrading pip in $(VENV)"
	$(PIP) --upgrade pip

# hightide and its own dependencies only: what `hightide serve` and the operator commands need.
$(BASE_STAMP): pyproject.toml | $(BIN)/python
	@echo "==> installing hightide (the broker and the operator commands) into $(VENV)"
	$(PIP) -e .
	@touch $@

$(CONSOLE_STAMP): pyproject.toml | $(BIN)/python
	@echo "==> installing hightide with the console extra (Starlette, Jinja2, uvicorn) into $(VENV)"
	$(PIP) -e '.[console]'
	@touch $@ $(BASE_STAMP)

$(SPARK_STAMP): pyproject.toml | $(BIN)/python
	@echo "==> installing hightide with the Spark extra (PySpark, Arrow, pandas: ~0.6 GB) into $(VENV)"
	$(PIP) -e '.[spark]'
	@touch $@ $(BASE_STAMP)

# Everything: every extra, the test and lint tools.
$(STAMP): pyproject.toml | $(BIN)/python
	@echo "==> installing hightide with every extra and the test tools into $(VENV)"
	$(PIP) -e '.[test]'
	@touch $@ $(BASE_STAMP) $(CONSOLE_STAMP) $(SPARK_STAMP)

venv: $(STAMP)

kcat:
	@command -v kcat >/dev/null 2>&1 || (command -v apt-get >/dev/null 2>&1 && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null) || \
	  echo "kcat not installed; kcat tests will be skipped")

# Headless Chromium and its driver for the console's browser tests (tests/console).
chromium:
	@(command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1) || \
	  (command -v apt-get >/dev/null 2>&1 && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null) || \
	  echo "chromium not installed; the console's browser tests will be skipped")

serve: $(BASE_STAMP)
	@echo "==> starting: hightide serve$(if $(ARGS), $(ARGS)) (Ctrl-C stops it)"
	$(BIN)/hightide serve $(ARGS)

console: $(CONSOLE_STAMP)
	@echo "==> starting: hightide console$(if $(ARGS), $(ARGS)) (Ctrl-C stops it)"
	$(BIN)/hightide console $(ARGS)

spark: $(SPARK_STAMP)
	@echo "==> the Spark extra is in $(VENV): see docs/spark.md"

lint: $(STAMP)
	$(BIN)/lint-imports
	$(BIN)/mypy

# kafkajs for the tests that drive it (tests/js): installed from the lock file.
jsdeps:
	@if [ -f tests/js/package-lock.json ]; then npm ci --prefix tests/js --no-audit --no-fund --silent; fi

# The client matrix's other client versions (tests/integration/test_client_matrix.py): the
# oldest kafka-python 2.0 and aiokafka in a venv of their own, and the Java client's jars
# (from a PyPI wheel). Rebuilt only when this Makefile changes.
CLIENTS := .venv-clients
CLIENTS_STAMP := $(CLIENTS)/.installed
$(CLIENTS_STAMP): Makefile tests/clients/java_jars.py
	rm -rf $(CLIENTS)/old $(CLIENTS)/java
	$(PYTHON) -m venv $(CLIENTS)/old
	$(CLIENTS)/old/bin/python -m pip install -q kafka-python==2.0.2 aiokafka==0.8.1
	$(BIN)/python tests/clients/java_jars.py $(CLIENTS)/java
	touch $@

clients: $(STAMP) $(CLIENTS_STAMP)

test: $(STAMP) kcat chromium jsdeps clients
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python bench/produce_consume.py

clean:
	rm -rf $(VENV) $(CLIENTS) hightide-data
