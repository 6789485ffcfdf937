# `make demo` and `make test` bootstrap their own environment in .venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The CPU build of torch; installed first so that nothing pulls a multi-GB CUDA build.
TORCH_SPEC ?= torch==2.13.0

.PHONY: demo test bench clean gpu-check

$(BIN)/moelab: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/pip install --quiet -e ".[test]"
	touch $@

# One thread per run, two runs at a time: the same numbers on every machine (they depend on the
# thread count), twice the throughput of one run on two cores.
demo: $(BIN)/moelab
	OMP_NUM_THREADS=1 $(BIN)/moelab study demo --out demo_out --jobs 2

test: $(BIN)/moelab
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q

bench: $(BIN)/moelab
	for b in benchmarks/*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) demo_out

# On a GPU machine, with its own torch: the cuda tests and the GPU measurements, about 6 minutes
# (benchmarks/gpu_check.sh; BENCHMARKS.md, "GPU").
gpu-check:
	PYTHON=$(PYTHON) bash benchmarks/gpu_check.sh
