# Ballast — the two commands a user needs are `make demo` and `make test`; both run `make setup`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
CACHE ?= .cache
ARGS ?=
# pytest workers for `make test` (xdist); 0 runs the suite in one process
TEST_WORKERS ?= 2
PARALLEL := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder)

.PHONY: setup demo test test-unit test-integration lint bench bench-codec bench-planner bench-controller bench-router bench-router-compare bench-router-secured bench-router-startup bench-reduce bench-reduce-throughput bench-reduce-soak bench-reduce-calm bench-reduce-skew bench-control bench-migration bench-shed bench-scaling chaos clean-cache

setup:
	@bash deploy/setup.sh

demo: setup
	$(PY) -m services.demo $(ARGS)

test: setup lint
	$(PY) -m pytest tests $(PARALLEL) $(ARGS)

test-unit: setup
	$(PY) -m pytest tests -m unit $(ARGS)

test-integration: setup
	$(PY) -m pytest tests -m "integration or e2e" $(ARGS)

lint: setup
	$(VENV)/bin/ruff check ballast services spark_jobs tests bench docs/examples

bench: bench-codec bench-planner bench-controller bench-router bench-router-startup bench-reduce bench-control bench-migration bench-shed

bench-codec: setup
	$(PY) bench/codec_bench.py $(ARGS)

bench-planner: setup
	$(PY) bench/planner/run.py $(ARGS)

bench-controller: setup
	$(PY) -m bench.controller $(ARGS)

clean-cache:
	rm -rf $(CACHE) $(VENV)

bench-router: setup
	$(PY) bench/router/run.py $(ARGS)

BASE ?= HEAD~1
bench-router-compare: setup
	$(PY) bench/router/compare.py --base $(BASE) $(ARGS)

bench-router-secured: setup
	$(PY) bench/router/secured.py $(ARGS)

bench-router-startup: setup
	$(PY) bench/router/startup.py $(ARGS)

bench-reduce: setup
	$(PY) -m bench.reduce $(ARGS)

# the parts of bench-reduce one at a time (each writes bench/results/reduce-<part>.json and .png)
bench-reduce-throughput: setup
	$(PY) -m bench.reduce --parts throughput $(ARGS)

bench-reduce-soak: setup
	$(PY) -m bench.reduce --parts soak $(ARGS)

bench-reduce-calm: setup
	$(PY) -m bench.reduce --parts calm $(ARGS)

bench-reduce-skew: setup
	$(PY) -m bench.reduce --parts skew $(ARGS)

bench-control: setup
	$(PY) -m bench.control $(ARGS)

# the controller's pacing modes on the Spark reduce (bench/results/migration.json and .png; ARGS=--quick)
bench-scaling: setup
	$(PY) -m bench.scaling $(ARGS)

bench-migration: setup
	$(PY) -m bench.migration $(ARGS)

# load shedding under 2x overload, on and off (bench/results/shed.json and .png; ARGS=--quick)
bench-shed: setup
	$(PY) -m bench.shed $(ARGS)

# the fault campaign over the whole pipeline on three brokers (bench/results/chaos.json and .png;
# ARGS="--seeds 1 --short" for one short run; docs/chaos.md)
chaos: setup
	$(PY) -m bench.chaos $(ARGS)
