# Two entry points a newcomer needs: `make repro` (build every library) and `make test`.
VENV ?= .venv
PYTHON ?= python3.11
PY := $(VENV)/bin/python
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: setup repro test test-slow
setup: $(VENV)/.installed

# torch first and exactly: an unpinned torch pulls several GB of CUDA wheels.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test,bench,tune]'
	touch $@

repro: setup
	dvc repro

test: setup
	$(PY) -m pytest

test-slow: setup  # only the full-size Kokoro-82M checks (not the default suite)
	$(PY) -m pytest -m slow -s
