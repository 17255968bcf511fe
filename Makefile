# Two commands do everything on a fresh clone (see README.md):
#   make test   — set up .venv, then run the test suite against the reference solutions
#   make main   — set up .venv, then run the main job (grade, train CartPole, RLHF)
# Override the interpreter with PYTHON=python3.12, or the torch wheel with TORCH_SPEC=...

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# A CPU build of torch, installed before the project so pip never pulls a CUDA build.
TORCH_SPEC ?= torch==2.13.0

.PHONY: setup test test-notebooks main grade check-figures mutation clean

# torch first, with pip (TORCH_SPEC: pip reads the machine's package settings, where the CPU wheel is; uv would
# take PyPI's default build of torch, with CUDA); then the rest with uv (seconds, where pip takes about a minute),
# or with pip where uv cannot be had. torch is already there, so uv keeps it and never looks for a build.
# --compile-bytecode: pip writes .pyc files at install, uv only when asked; without them every test
# subprocess compiles gymnasium, transformers, wandb, ... again (where PYTHONDONTWRITEBYTECODE is set).
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet uv && $(PY) -m uv pip install --quiet --compile-bytecode --python $(PY) -e ".[dev,hf]" \
		|| $(PY) -m pip install --quiet -e ".[dev,hf]"
	touch $@

setup: $(VENV)/.installed

# PYTHONDONTWRITEBYTECODE= : Python's default (some shells and containers set it): the suite starts hundreds of
# Python processes (the meta-run's shards, the commands, the notebook kernels, torchrun's ranks), and without
# the .pyc files of workbook/, solutions/ and tests/ each one compiles them again (about 1.3 s of CPU each).
# They go in __pycache__/, which git ignores. --durations=10 and the plugin's budget table end the run with
# where its seconds went (docs/testing.md, "The suite's budget").
# -n $(TEST_JOBS): pytest-xdist's workers, a test file each at a time (--dist loadfile: a file's shared fixtures, such
# as a trained run several tests read, are built once), in the order tests/conftest.py gives them (the longest files
# first: --no-loadscope-reorder, else xdist starts with the files of most tests); the meta-run's shards run beside
# them from the start (tests/conftest.py). docs/testing.md, "The suite's budget", has the measurements.
TEST_JOBS ?= 2

test: $(VENV)/.installed
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest --impl=solutions -n $(TEST_JOBS) --dist loadfile --no-loadscope-reorder --durations=10

# Every notebook executed headless in a real kernel: filled with the reference, with the stubs, with a planted
# mistake, and grade on notebook work (make test checks only that they are current; CI runs both targets).
test-notebooks: $(VENV)/.installed
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest --impl=solutions tests/test_notebooks.py --all-notebooks -n $(TEST_JOBS)

main: $(VENV)/.installed
	$(PY) -m workbook main

grade: $(VENV)/.installed
	$(PY) -m workbook grade

# The README's headline figures, rerun on this machine: each claim, what it measured, holds or not
# (benchmarks/check_figures.py; about 10 minutes, SLOW=1 for every claim: about 70).
check-figures: $(VENV)/.installed
	$(PY) benchmarks/check_figures.py $(if $(SLOW),--slow)

# Maintainers' tool (slow: minutes to an hour per part on 2 cores): the mutation score of the
# exercise tests per part, with the survivors listed (docs/mutation.md). PART=1 for one part.
mutation: $(VENV)/.installed
	$(PY) -m pip install --quiet -e ".[mutation]"
	nice -n 15 $(PY) scripts/mutation_score.py $(if $(PART),--part $(PART))

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache wandb runs .mutation
