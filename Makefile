# sluice — developer entry points. `make test` is what CI runs (see .ci/run).
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV        := .venv
BIN         := $(VENV)/bin
PY          := $(BIN)/python
STAMP       := $(VENV)/.installed
VENV_COMPILE ?= --compile-bytecode
REGION      ?= us-east-1
export SAM_CLI_TELEMETRY := 0
export AWS_DEFAULT_REGION ?= $(REGION)
# sam build runs the layer's Makefile with this PATH, so it finds the venv's pip.
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: help venv bytecode lint typecheck validate asl build security security-venv static check check-tests test tests library unit functional e2e demo up soak bench deploy clean

help:
	@echo "make demo      the whole app on this machine (embedded AWS, no Docker): scenarios, expected vs observed"
	@echo "make up        deploy template.yaml into embedded AWS and keep it running (prints endpoint + names)"
	@echo "make check     lint + types + unit and functional tests, no deployed stack (about 2 minutes on 2 cores; prints its time)"
	@echo "make test      everything: make check's, sam validate --lint, asl, sam build, checkov, e2e and soak (what CI runs)"
	@echo "make build     sam build (no Docker needed)"
	@echo "make library   the runtime library's wheel at the oldest and the newest of its dependency ranges, each in a clean venv: pip check, import time, its tests"
	@echo "make security  checkov on template.yaml in each mode (its own venv): 0 failed checks, every skip explained in the template"
	@echo "make deploy    sam build && sam deploy (a new stack: asks where alarms go, trusted senders, operators, the business key; ENV=prod for production)"
	@echo "make soak      seeded fault schedules through the stack (SOAK_SEEDS=500, SOAK_WORKERS=2×cores): lost, duplicated, unexpected, per workload"
	@echo "make bench     run the benchmarks in benchmarks/"

# Create or reuse .venv with Python 3.13 where the machine has it (the Lambda runtime's version). pip
# installs uv into it, and uv the dependencies: the same versions pip resolves, in seconds instead of a
# minute or two (a clean clone's two virtualenvs: 141 s with pip beside the rest of CI). The venv keeps its
# pip: sam build runs the layer's Makefile with it. pip installs uv with errors only (-qq): what it warns of
# there is its own configuration on this machine (an index folder that is absent), nothing sluice can act on.
# Bytecode is compiled at install: a machine with PYTHONDONTWRITEBYTECODE set (this kind of machine has it)
# would otherwise compile botocore, moto and the rest from source in each of the hundreds of interpreters
# `make test` starts (workers, stacks, soak workers, fresh-interpreter tests).
$(STAMP): pyproject.toml layers/common/pyproject.toml cli/pyproject.toml local/pyproject.toml layers/common/requirements.txt
	@test -x $(PY) || "$$(scripts/find-python.sh)" -m venv $(VENV)
	$(PY) -m pip install --quiet --quiet --upgrade pip uv
	$(BIN)/uv pip install --quiet $(VENV_COMPILE) --python $(PY) -e '.[dev]'
	@touch $@

venv: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Strictness per package lives in pyproject.toml; each function folder is its own Lambda root (an
# example with a template of its own keeps its function's code in src/, its CodeUri). A folder without
# Python files of its own (examples/own-function/, beside its src/) is skipped.
typecheck: $(STAMP)
	$(BIN)/mypy layers/common/sluice local/sluice_local cli/sluice_cli
	$(BIN)/mypy --strict benchmarks
	@set -e; shopt -s nullglob; for d in functions/*/ examples/*/ examples/*/src/ workloads/*/; do \
	  files=("$$d"*.py); if [ $${#files[@]} -eq 0 ]; then continue; fi; \
	  MYPYPATH="layers/common:$$d" $(BIN)/mypy --strict --no-error-summary "$${files[@]}"; \
	done; echo "functions, examples and workloads/: strict, no issues"
	$(BIN)/mypy tests

validate: $(STAMP)
	$(BIN)/sam validate --lint --region $(REGION)
	$(BIN)/python scripts/lint_nested.py
	@set -e; for t in examples/*/template.yaml; do $(BIN)/sam validate --lint --region $(REGION) -t "$$t"; done

# Node tools (asl-validator) from package-lock.json; reinstalled only when the lock file changes.
node_modules/.package-lock.json: package-lock.json
	npm ci --no-audit --no-fund --silent
	@touch $@

# Structure of every state machine definition (the ${...} DefinitionSubstitutions sit inside JSON
# strings, which asl-validator accepts as they are). Checks all files, fails if any is invalid.
asl: node_modules/.package-lock.json
	@shopt -s nullglob; status=0; \
	for f in statemachines/*.asl.json; do \
	  npx --no-install asl-validator --json-path "$$f" || status=1; \
	done; \
	exit $$status

build: $(STAMP)
	$(BIN)/sam build
	@du -sk .aws-sam/build/CommonLayer | awk '{printf "built CommonLayer: %.1f MiB unzipped\n", $$1/1024}'

# checkov in a virtualenv of its own: it pins boto and other versions sluice's own venv moves past.
# Every suppression sits in template.yaml beside its resource, with its reason (Metadata.checkov.skip).
CHECKOV_VENV  := .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed
$(CHECKOV_STAMP): requirements-checkov.txt
	@test -x $(CHECKOV_VENV)/bin/python || python3 -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install --quiet --quiet --upgrade pip uv
	$(CHECKOV_VENV)/bin/uv pip install --quiet --compile-bytecode --python $(CHECKOV_VENV)/bin/python -r requirements-checkov.txt
	@touch $@

security-venv: $(CHECKOV_STAMP)

security: $(STAMP) $(CHECKOV_STAMP)
	$(CHECKOV_VENV)/bin/python scripts/security_scan.py

# Tiers (markers in pyproject.toml, applied in tests/conftest.py): `make check` is the fast loop, `make test`
# runs everything. Both run in parallel: the static checks beside the tests, the tests on pytest-xdist
# workers. In `make test` the three soak runs, the three groups of e2e files sharing a session stack (a
# group's tests share one worker and its stack: tier_group in tests/conftest.py) and the group of e2e files
# starting stacks of their own start first, one a worker, and the unit and functional tests fill in.
CHECK_WORKERS ?= 2
TEST_WORKERS  ?= 7
PYTEST_XDIST  := --dist loadgroup --no-loadscope-reorder
TEST_PARTS    ?= tests static library
# In `make test` the library's tests run at both ends of its ranges (`library`), not in the dev environment;
# the three parts start at once (-j3): the tests keep both cores busy, the other two fill in beside them.
TESTS_MARK    ?=
CHECK_PARTS   ?= check-tests lint typecheck

static: lint typecheck validate asl build security

# The repository's own packages compiled once, for the same reason as the venv's (no stale file matters:
# Python checks each .pyc against its source).
bytecode: $(STAMP)
	@$(PY) -m compileall -q -j 0 layers/common/sluice local/sluice_local cli/sluice_cli functions examples >/dev/null

check-tests: $(STAMP) bytecode
	$(BIN)/pytest -q -n $(CHECK_WORKERS) $(PYTEST_XDIST) -m "not stack and not bench" tests/unit tests/functional

check: $(STAMP)
	@start=$$(date +%s); $(MAKE) --no-print-directory -k -j2 --output-sync=target $(CHECK_PARTS); \
	  status=$$?; echo "make check: lint, types, unit and functional in $$(( $$(date +%s) - start )) s, exit $$status"; \
	  exit $$status

tests: $(STAMP) bytecode
	$(BIN)/pytest -n $(TEST_WORKERS) $(PYTEST_XDIST) --durations=25 $(if $(TESTS_MARK),-m "$(TESTS_MARK)") $(PYTEST_ARGS)

library: $(STAMP)
	$(PY) scripts/library_ends.py

test: $(STAMP)
	@start=$$(date +%s); $(MAKE) --no-print-directory -k -j3 --output-sync=target TESTS_MARK="not library" $(TEST_PARTS); \
	  status=$$?; echo "make test: static checks and every tier in $$(( $$(date +%s) - start )) s, exit $$status"; \
	  exit $$status

unit functional e2e: $(STAMP)
	$(BIN)/pytest tests/$@

demo: $(STAMP)
	$(PY) -m sluice_local demo

up: $(STAMP)
	$(PY) -m sluice_local up --fast $(UP_ARGS)

SOAK_SEEDS ?= 500
SOAK_WORKERS ?=
soak: $(STAMP)
	$(PY) -m sluice_local soak --seeds $(SOAK_SEEDS) $(if $(SOAK_WORKERS),--workers $(SOAK_WORKERS)) $(SOAK_ARGS)

# Every benchmark at full size; the four cost.py prices write their figures to BENCH_FIGURES, which cost.py
# then reads (not run twice).
BENCH_FIGURES ?= .bench-figures
bench: $(STAMP)
	@mkdir -p $(BENCH_FIGURES)
	$(PY) benchmarks/cold_start.py
	$(PY) benchmarks/cold_start.py --invoke --runs 15
	$(PY) benchmarks/consumer_overhead.py --json $(BENCH_FIGURES)/consumer.json
	$(PY) benchmarks/delay_cost.py --json $(BENCH_FIGURES)/delays.json
	$(PY) benchmarks/redrive_requests.py --json $(BENCH_FIGURES)/redrive.json
	$(PY) benchmarks/jobs.py --json $(BENCH_FIGURES)/jobs.json
	$(PY) benchmarks/cost.py --figures $(BENCH_FIGURES)

ENV ?= default
# A new stack (none of samconfig.toml's stack_name in your AWS configuration's region): scripts/first_deploy.py
# asks only for what has no safe default (where alarms go, trusted senders, operators, the business key),
# runs `sam deploy` with them and prints a checklist. A stack that exists: `sam deploy --config-env $(ENV)`,
# unguided, every answer kept. ASK=1 asks again on an existing stack; DEPLOY_ARGS are the script's flags
# (--non-interactive --critical ..., --print-command: docs/deploy.md). The region is your AWS
# configuration's (AWS_REGION, AWS_DEFAULT_REGION, your profile's) or REGION=... given to make, never this
# Makefile's default for the local tools.
DEPLOY_REGION := $(if $(filter command line environment,$(origin REGION)),--region $(REGION))
DEPLOY_UNSET  := $(if $(filter file,$(origin AWS_DEFAULT_REGION)),env -u AWS_DEFAULT_REGION)
deploy: build
	@$(DEPLOY_UNSET) $(PY) scripts/first_deploy.py --env $(ENV) $(DEPLOY_REGION) $(if $(ASK),,--if-new) $(DEPLOY_ARGS)

clean:
	rm -rf .aws-sam .pytest_cache .mypy_cache .ruff_cache .sluice-local .library-ends
