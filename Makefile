# The two commands of README.rst: `make demo` (set up, run the main job) and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup lint test demo bench clean

$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

test: lint
	mkdir -p build
	$(BIN)/python -m pytest --junitxml=build/junit.xml
	$(BIN)/python .ci/check_junit.py build/junit.xml

demo: setup
	$(BIN)/slurm-elastic plan --policy ones --gpus 64 --jobs 24 --rounds 3
	$(BIN)/slurm-elastic plan --policy dp --gpus 64 --jobs 24

bench: setup
	$(BIN)/slurm-elastic bench planner --policy dp --gpus 4096 --jobs 1000
	$(BIN)/slurm-elastic bench planner --policy ones --gpus 4096 --jobs 1000 --param generations=1

clean:
	rm -rf $(VENV) build .mypy_cache .ruff_cache .pytest_cache .hypothesis
