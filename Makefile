# The two commands of README.rst: `make demo` (set up, run the main job) and `make test`.
PYTHON ?= python3
# pytest workers: tests/slurm is split over two dev clusters (tests/slurm/conftest.py), each group in
# one worker with a cluster of its own; everything else goes to whichever worker is free
TEST_WORKERS ?= 3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: system setup lint test demo demo-sim reproduce bench release-check clean

$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev,launcher]'
	touch $(STAMP)

setup: $(STAMP)

system:
	scripts/install-system-packages

lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

test: system lint
	mkdir -p build
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup --junitxml=build/junit.xml
	$(BIN)/python .ci/check_junit.py build/junit.xml
	@# where Slurm is required (CI), the main job must pass too: every job COMPLETED, every sample once
	@if [ "$${SLURM_ELASTIC_REQUIRE_SLURM:-0}" = 1 ]; then $(BIN)/slurm-elastic demo --out build/demo; fi

# The main job: a real local Slurm cluster, the acting daemon, elastic CNN jobs resized in place
# while they train, and the allocation report (root; a few minutes on 2 cores).
demo: system setup
	$(BIN)/slurm-elastic demo --out out/demo

demo-sim: setup
	$(BIN)/slurm-elastic simulate --workload ones-longhorn-50 --gpus 64 --policy ones,dp,optimus,tiresias \
		--seeds 1 --json out/demo-sim/results.json --report out/demo-sim
	@echo "report: out/demo-sim/index.html"

reproduce: setup
	$(BIN)/slurm-elastic reproduce --seeds 1-5 --out out/reproduce

bench: setup
	$(BIN)/slurm-elastic bench planner --policy dp --gpus 4096 --jobs 1000
	$(BIN)/slurm-elastic bench planner --policy ones --gpus 4096 --jobs 1000 --param generations=1
	$(BIN)/slurm-elastic bench simulate --jobs 10000 --gpus 1024 --policy dp

# A real cluster of a Slurm release built from SchedMD's source, with pyslurm: the backends agree, the
# acting daemon starts and shrinks (root; ~20 minutes the first time, then ~1 minute; not in CI).
RELEASE ?= 25.11.7
release-check: setup
	scripts/release-check $(RELEASE)

clean:
	rm -rf $(VENV) build out .mypy_cache .ruff_cache .pytest_cache .hypothesis
