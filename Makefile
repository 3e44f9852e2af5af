# The two commands of the README: `make demo` and `make test`. Both set everything up first.
VENV ?= .venv
PY := $(VENV)/bin/python
# TensorFlow's C++ start-up lines (oneDNN, CUDA probing) are noise in demos and test logs.
export TF_CPP_MIN_LOG_LEVEL ?= 2
export TF_USE_LEGACY_KERAS = 1

.PHONY: setup demo report lint test test-fast bench bench-network clean

setup:
	@bash scripts/setup.sh

demo: setup
	@bash scripts/demo.sh

report: setup  ## one page comparing the runs of runs/ (what `make demo` ends with): runs/report.html
	@$(VENV)/bin/tfdist report runs --out runs/report.html

lint: setup  ## ruff, then import-linter's layer contracts, both from pyproject.toml (seconds; CI runs it before the tests)
	@$(VENV)/bin/ruff check --quiet .
	@$(PY) scripts/lint_imports.py

# The suite starts ~900 Python processes, each importing tfdist's modules; an editable install leaves them
# uncompiled, and with PYTHONDONTWRITEBYTECODE set each process would compile them again (~0.1 CPU-s
# each). compileall writes the bytecode once; Python rereads it, or recompiles a source that changed.
test: setup  ## the whole suite on 2 workers (tests/scheduling.py); prints the 15 slowest tests
	@$(PY) -m compileall -q tfdist callbacks examples benchmarks tests
	@$(PY) -m pytest -q -n 2 --no-loadscope-reorder --durations=15

test-fast: setup  ## the tests that start no process importing TensorFlow (see the `slow` marker)
	@TFDIST_FAST_FUZZ=1 $(PY) -m pytest -q -m "not slow"

bench: setup
	@$(PY) benchmarks/compare.py

bench-network: setup  ## needs root: parameter servers vs Horovod on the network lab, measured vs `tfdist advise`
	@$(PY) benchmarks/network.py
	@$(PY) benchmarks/time_to_accuracy.py
	@$(PY) benchmarks/auto_plan.py

clean:
	rm -rf $(VENV) build *.egg-info runs
