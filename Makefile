# The two commands: `make demo` runs the main job, `make test` runs every check.
# Both install what they need: a virtual environment, the Docker engine (Debian's docker.io)
# when none answers, and the sandbox images (the base one, and the data one with numpy,
# pandas, pyarrow and matplotlib, whose wheels are downloaded on the host).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: all setup venv engine image image-data postgres demo test lint types pytest soak bench clean

all: test

$(STAMP): pyproject.toml
	@$(PYTHON) -m venv $(VENV) 2>/dev/null || { \
	  echo "installing python3-venv"; apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv python3-pip >/dev/null && \
	  $(PYTHON) -m venv $(VENV); }
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

engine:
	@sandbox/image/ensure-engine.sh

image: venv engine
	@PYTHON=$(PY) sandbox/image/build.sh

image-data: image
	@PYTHON=$(PY) sandbox/image/build-data.sh

setup: image image-data

# PostgreSQL's binaries: the tests and the write benchmark start a throwaway server of their own.
postgres:
	@scripts/ensure-postgres.sh

# Debian's chromium, for the approval page's browser test.
browser:
	@scripts/ensure-browser.sh

demo: setup
	$(PY) -m examples.billing.demo
	$(PY) -m examples.data.demo

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

types: venv
	@$(PY) scripts/import_tree.py >/dev/null
	$(VENV)/bin/mypy

# The long runs (the bridge fuzzer, the data image's isolation suite under gVisor) are
# `make soak`'s, so that `make test` keeps to about 15 minutes.
# Two test processes (pytest-xdist): most tests wait on containers, deadlines or the ledger,
# and each process keeps to its own containers, database schemas and ports.
TEST_WORKERS ?= 2

pytest: setup postgres browser
	$(PY) -m pytest -q -m "not slow" -n $(TEST_WORKERS)

soak: setup postgres
	$(PY) -m pytest -q -m slow

test: lint types pytest

bench: setup postgres
	$(PY) bench/sandbox_start.py
	$(PY) bench/throughput.py
	$(PY) bench/harness_warm.py
	$(PY) bench/admission.py
	$(PY) bench/bridge.py
	$(PY) bench/writes.py
	$(PY) bench/context_bytes.py
	$(PY) bench/hostile_frames.py
	$(PY) bench/audit.py
	$(PY) bench/lifecycle_cpu.py
	$(PY) bench/engine_floor.py

clean:
	rm -rf $(VENV) .build .mypy_cache .pytest_cache .ruff_cache *.egg-info
