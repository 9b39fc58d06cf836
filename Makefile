# Two entry points a newcomer needs: `make repro` (build every library) and `make test`.
VENV ?= .venv
PYTHON ?= python3.11
PY := $(VENV)/bin/python
EXTRAS := build,weights,text,text-zh,text-ja,serve,test,lint,bench,tune,cross,ci,docs
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: setup repro test test-fast test-slow lint format lock results
setup: $(VENV)/.installed

# torch first and exactly: an unpinned torch pulls several GB of CUDA wheels. Then every
# transitive pin of requirements.lock, so a fresh machine gets the environment the artifacts
# were built with, and the package itself without resolving anything again. Last, what the
# aarch64 target needs to build and run here (apt when root, else pip; ~1 min on a new machine).
# kokoro-onnx, the peer bench_e2e times, without its deps: it requires `phonemizer`, whose module
# name is also misaki's `phonemizer-fork`, and the bench gives it phonemes (eval/kokoro_onnx_package.py).
$(VENV)/.installed: pyproject.toml requirements.lock Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -r requirements.lock
	$(PY) -m pip install -q --no-deps -e . kokoro-onnx==0.6.1
	$(PY) -m kokoro_tvm.devices.setup  # qemu-user, an aarch64 linker and sysroot (cross targets)
	touch $@

repro: setup  # dvc.lock pruned of removed stages' entries (DVC keeps them) before and after
	$(PY) -m kokoro_tvm.pipeline.lockfile
	dvc repro
	$(PY) -m kokoro_tvm.pipeline.lockfile

# One pytest worker per core (pytest-xdist), each test module on one worker so that its
# module-scoped fixtures are built once (tests/run_once.py builds what several workers need
# once). TEST_WORKERS=0 runs every test in this process, one after another.
TEST_WORKERS ?= auto
XDIST = -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder

test: setup  # everything CI runs
	$(PY) -m pytest $(XDIST)

test-fast: setup  # the fast tier: all but the whole-project DVC, CI-workflow and qemu tests
	$(PY) -m pytest $(XDIST) -m "not slow and not pipeline"

lint: setup  # what CI checks: ruff's lint rules and format (pyproject.toml [tool.ruff])
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: setup  # fix what ruff can fix, then format
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

test-slow: setup  # only the full-size Kokoro-82M checks (not the default suite)
	$(PY) -m pytest -m slow -s

# After a finished `dvc repro`: this CPU's metrics into docs/results/<cpu>.json, then
# docs/results.md, its plots and the README's results table from every CPU's file.
results: setup
	$(PY) -m kokoro_tvm.results

# Regenerate requirements.lock after editing the pins in pyproject.toml (pip-tools resolves every
# extra together; torch's local tag is dropped so that `torch==2.13.0` takes this machine's CPU wheel).
lock:
	$(PYTHON) -m venv /tmp/kokoro-tvm-lock && /tmp/kokoro-tvm-lock/bin/pip install -q pip-tools==7.6.2
	/tmp/kokoro-tvm-lock/bin/pip-compile -q --strip-extras --no-emit-index-url --no-emit-find-links \
	  $(foreach e,$(subst $(comma), ,$(EXTRAS)),--extra $(e)) -o requirements.lock pyproject.toml
	sed -i 's/^torch==\(.*\)+cpu$$/torch==\1/' requirements.lock
comma := ,
