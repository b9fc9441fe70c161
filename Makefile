# Two commands do all set-up on a fresh machine:
#   make serve   - create .venv, install hightide, start a broker on 127.0.0.1:9092
#   make test    - create .venv, install hightide with test extras (and kcat), run every test
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: serve test venv lint bench clean jsdeps chromium

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

test: $(STAMP) kcat chromium jsdeps
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python bench/produce_consume.py

clean:
	rm -rf $(VENV) hightide-data
