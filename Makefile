# `make demo` and `make test` bootstrap their own environment in .venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The CPU build of torch, installed first so that nothing pulls a multi-GB CUDA build: from
# PyTorch's CPU-only index (on PyPI itself a Linux torch is the CUDA build), falling back to the
# configured indexes and wheel caches where that index cannot be reached (probed once: pip
# itself would retry it for every package).
TORCH_SPEC ?= torch==2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: demo lint test test-fast test-torch-floor bench clean gpu-check

$(BIN)/moelab: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	if $(BIN)/python -c "import urllib.request as r; r.urlopen('$(TORCH_CPU_INDEX)/', timeout=10)" \
		2>/dev/null; then $(BIN)/pip install --quiet --index-url "$(TORCH_CPU_INDEX)" "$(TORCH_SPEC)"; \
	else $(BIN)/pip install --quiet "$(TORCH_SPEC)"; fi
	$(BIN)/pip install --quiet -e ".[test]"
	touch $@

# One thread per run, two runs at a time: the same numbers on every machine (they depend on the
# thread count), twice the throughput of one run on two cores.
demo: $(BIN)/moelab
	OMP_NUM_THREADS=1 $(BIN)/moelab study demo --out demo_out --jobs 2

# The linter and the type checker (both configured in pyproject.toml) before the tests: seconds
# with mypy's cache warm, about 40 CPU-seconds without it.
lint: $(BIN)/moelab
	$(BIN)/ruff check src tests benchmarks experiments
	$(BIN)/mypy

test: lint
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q
	$(MAKE) --no-print-directory test-torch-floor

# The tier to run after each change: every test not marked slow (pyproject.toml's markers: a
# slow test trains through the engine, spawns a process, starts Ray, compiles, builds a venv or
# fits the law forms), no lint: about 1,400 tests in 86-91 CPU-seconds, measured twice on a
# busy 2-core CPU (so about 1.5 minutes idle; 2026-12-06). `make test` runs everything.
test-fast: $(BIN)/moelab
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -m "not slow"

# The oldest torch and transformers moelab declares (pyproject.toml), tested rather than assumed.
# Only a CUDA build of that torch is published (about 5 GB; it runs on a CPU), so it lives in a
# venv of its own that is built once and reused, and runs only the tests that depend on what
# torch.compile can trace or on the transformers reference models.
TORCH_FLOOR := 2.11.0
FLOOR_VENV := .venv-torch2.11
TRANSFORMERS_FLOOR := 5.6.0
FLOOR_TESTS := tests/test_train_compile.py tests/test_moe_grouped.py tests/test_moe.py \
	tests/test_linear_cross_entropy.py tests/test_cuda.py tests/test_host_syncs.py \
	tests/test_model.py tests/test_train_export.py

$(FLOOR_VENV)/bin/moelab: pyproject.toml
	$(PYTHON) -m venv $(FLOOR_VENV)
	$(FLOOR_VENV)/bin/pip install --quiet "torch==$(TORCH_FLOOR)"
	$(FLOOR_VENV)/bin/pip install --quiet -e . "pytest>=7" "transformers==$(TRANSFORMERS_FLOOR)"
	touch $@

test-torch-floor: $(FLOOR_VENV)/bin/moelab
	OMP_NUM_THREADS=1 $(FLOOR_VENV)/bin/python -m pytest -q $(FLOOR_TESTS)

bench: $(BIN)/moelab
	for b in benchmarks/*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) $(FLOOR_VENV) demo_out

# On a GPU machine, with its own torch: the cuda tests and the GPU measurements, about 6 minutes
# (benchmarks/gpu_check.sh; BENCHMARKS.md, "GPU").
gpu-check:
	PYTHON=$(PYTHON) bash benchmarks/gpu_check.sh
