# Two entry points a newcomer needs: `make repro` (build every library) and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: setup repro test test-slow
setup: $(VENV)/.installed

# torch first and exactly: an unpinned torch pulls several GB of CUDA wheels.
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	touch $@

repro: setup
	dvc repro

test: setup
	$(PY) -m pytest

test-slow: setup
	$(PY) -m pytest -m slow
