# Set-up, demo and tests on a fresh machine. torch==2.13.0 (CPU build) is installed first: an
# unconstrained torch would pull a multi-GB CUDA build.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
DOCREFRAG := $(VENV)/bin/docrefrag

.PHONY: setup models demo lint test unit clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

models: setup
	$(DOCREFRAG) models fetch

demo: models
	$(DOCREFRAG) demo

lint: setup
	$(VENV)/bin/ruff check .

test: models lint
	$(PY) -m pytest -q

# tests/unit only: no model weights (no `models fetch` needed), no worker processes, under a minute
unit: setup
	$(PY) -m pytest -q tests/unit

clean:
	rm -rf $(VENV) docrefrag-demo .pytest_cache
