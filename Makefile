# itrlab: `make test` sets everything up (virtual environment, CPU torch first, the project with
# its dev extras) and runs the fast tier of the tests; `make test-all` (CI) runs every tier
# (docs/tests.md#tiers). `make sweep` runs the main job (the smoke DBL sweep), `make train` the demo training,
# `make flickr8k FROM=PATH_OR_URL` gets Flickr8K, verified, and its features (docs/data.md#flickr8k).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_VERSION ?= 2.13.0
PYTEST_ARGS ?=
# test processes (pytest-xdist; 0 = one process); --dist loadfile keeps a module, and its Ray
# session, on one process
PYTEST_WORKERS ?= 2
# the fast tier: no test that starts a process (e2e), the three-node cluster (cluster) or trains for long (slow)
FAST_TIER := not e2e and not cluster and not slow

.PHONY: setup test test-all lint format sweep train flickr8k bench-eval gpu-check clean

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "itrlab needs Python >= 3.11; set PYTHON=python3.11")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first, pinned: an unpinned resolve pulls several GB of CUDA packages.
	$(PY) -m pip install --quiet torch==$(TORCH_VERSION)
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

setup: $(VENV)/.installed

# pytest with the arguments given, then PYTEST_ARGS; its exit 5 (no test collected) is a failure here.
define pytest
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile --durations=25 $(1) $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest ran no tests" >&2; exit 1; fi; exit $$rc
endef

test: setup
	$(call pytest,-m "$(FAST_TIER)")

# every tier in one run: tests/conftest.py puts the cluster module first, then the other process-starting
# modules, and --no-loadscope-reorder keeps that order, so the longest overlap the rest on the 2 workers
test-all: setup
	$(call pytest,--no-loadscope-reorder)

# ruff's lint and format check (the fast tier runs both: tests/test_static.py); `make format` rewrites the files
LINTED := platform jobs benchmarks tests
lint: setup
	$(VENV)/bin/ruff check $(LINTED) && $(VENV)/bin/ruff format --check $(LINTED)

format: setup
	$(VENV)/bin/ruff check --fix $(LINTED) && $(VENV)/bin/ruff format $(LINTED)

# the main job: DBL's smoke sweep (A vs F on synthetic data) on a local Ray; SWEEP_ARGS: e.g. --dry-run
SWEEP_ARGS ?= --preset smoke
sweep: setup
	$(PY) jobs/sweep_dbl.py $(SWEEP_ARGS)

train: setup
	$(PY) jobs/train.py

# Flickr8K from its folder, a zip or tar archive of it, or an http(s) URL of the archive: verified against
# configs/datasets/manifests/flickr8k.json.gz, put in data/flickr8k/, its features in data/flickr8k_precomp/
FROM ?=
flickr8k: setup
	@if [ -z "$(FROM)" ]; then echo "make flickr8k: name the data: make flickr8k FROM=PATH_OR_URL (docs/data.md#flickr8k)" >&2; exit 2; fi
	$(VENV)/bin/itrlab data flickr8k --from "$(FROM)"

bench-eval: setup
	$(PY) benchmarks/eval.py

# The GPU check (benchmarks/gpu.py, docs/speed.md#the-gpu-check): on a machine without a package index,
# with the packages of .gpu/ (docs/speed.md says how to make it); else with this checkout's venv (make setup).
# GPU_CHECK_ARGS: e.g. --out /tmp/check --budget 300
GPU_CHECK_ARGS ?=
gpu-check:
	@if [ -f .gpu/gpu_env.sh ]; then . .gpu/gpu_env.sh && python3 benchmarks/gpu.py $(GPU_CHECK_ARGS); \
	else $(PY) benchmarks/gpu.py $(GPU_CHECK_ARGS); fi

clean:
	rm -rf $(VENV) .pytest_cache runs data mlflow.db
