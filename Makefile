# Stampede — `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Machines without an NVIDIA driver get the CPU build of torch (constraints/cpu.txt); a GPU
# machine gets pip's default (CUDA) build. Override with `make install TORCH_CONSTRAINT=`.
TORCH_CONSTRAINT ?= $(if $(shell command -v nvidia-smi 2>/dev/null),,-c constraints/cpu.txt)
ARGS ?=
# make learn: GAME="pong breakout" trains one multi-task agent on both; LABEL names the curve
# (when empty: defaults for one game, multitask for several); SEEDS=3 trains seeds 1, 2, 3 in turn.
GAME ?= pong
FRAMES ?= 10000000
LABEL ?=
SEEDS ?=
# make probe: LABEL=<name> ARGS="<overrides>" trains that recipe on every dev game (GAMES_SET, dev5)
# for FRAMES (3M unless given) in PROBE_ROOT/<label>/<game>, then prints the labels x games table.
GAMES_SET ?= dev5
PROBE_ROOT ?= runs/probe

.DEFAULT_GOAL := help
.PHONY: help install test test-isa test-slow test-slurm lint format train bench learn probe clean

help: ## Show this help
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  \033[1m%-10s\033[0m %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml constraints/cpu.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet $(TORCH_CONSTRAINT) -e '.[dev]'
	@touch $@

install: $(VENV)/.installed ## Create .venv (if missing) and install Stampede with its dev tools

test: install ## Run the test suite (slow tests excluded)
	$(PY) -m pytest $(ARGS)

test-isa: install ## The numerics tests again with the CPU kernels capped below this CPU's ISA
	scripts/test_limited_isa.sh $(ARGS)

test-slow: install ## Run only the slow tests (learning to threshold, soak)
	$(PY) -m pytest -m slow $(ARGS)

test-slurm: install ## Run the SLURM tests (needs scripts/local_slurm.sh start)
	$(PY) -m pytest -m slurm $(ARGS)

lint: install ## ruff (lint + format check) and mypy on src/stampede
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: install ## Format and auto-fix with ruff
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

train: install ## Train the default agent (Pong, DQN network); extra overrides via ARGS="..."
	$(PY) run.py $(ARGS)

bench: install ## Throughput benchmark: full loop vs env-only and learner-only ceilings
	$(PY) benchmarks/throughput.py $(ARGS)

learn: install ## Learning benchmark: train GAME for FRAMES, write its curve to docs/learning/
	$(PY) benchmarks/learning.py --game $(GAME) --frames $(FRAMES) $(if $(LABEL),--label $(LABEL)) \
		$(if $(SEEDS),--seeds $(SEEDS)) -- $(ARGS)

probe: install ## Probe a recipe on the dev set: make probe LABEL=<name> ARGS="<overrides>"
	$(PY) benchmarks/probe.py $(if $(LABEL),--label $(LABEL),--report-only) --games $(GAMES_SET) \
		$(if $(filter command line environment,$(origin FRAMES)),--frames $(FRAMES)) \
		--root $(PROBE_ROOT) -- $(ARGS)

clean: ## Remove caches (keeps .venv, runs/ and multirun/)
	rm -rf .pytest_cache .mypy_cache .ruff_cache build dist src/*.egg-info
