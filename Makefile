# Two commands do all set-up on a fresh machine:
#   make serve   - create .venv, install hightide, start a broker on 127.0.0.1:9092
#   make test    - create .venv, install hightide with test extras (and kcat), run every test
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: serve test venv lint bench clean jsdeps chromium clients

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

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

serve: $(STAMP)
	$(BIN)/hightide serve $(ARGS)

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
