# mlsandbox: `make demo` and `make test` each set everything up first (idempotent, cached outside the clone).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
SEED ?= 7

.PHONY: setup setup-demo demo test test-fast node-chaos-test bench bench-catalog bench-reliability bench-publish docs docs-serve lint gc clean help

help:
	@echo "make setup     install everything the tests need: venv with extras, MinIO, Toxiproxy, PostgreSQL, helm (idempotent)"
	@echo "make demo      install only what the demo needs (venv, MinIO), then one episode of tabular-quality-basic"
	@echo "make test      setup + the whole test suite (real services)"
	@echo "make test-fast setup + the tests that need no services (-m 'not services')"
	@echo "make bench     setup + benchmarks; figures printed and saved under .bench/"
	@echo "make bench-catalog  every family of the catalogue validated on sim and local (.bench/catalog.json; CI plays a sample)"
	@echo "make bench-reliability  setup + soak (100 episodes each way) and load (N = 1, 4, 16 sessions)"
	@echo "make bench-publish  copy the figures of .bench/*.json to benchmarks/results/ (committed; the site renders them)"
	@echo "make docs      build the documentation site into site/ (mkdocs --strict: a broken link fails)"
	@echo "make docs-serve  serve the documentation site at http://127.0.0.1:8000/, rebuilt on every change"
	@echo "make lint      ruff, the import-layer contracts and the type checker (mypy)"
	@echo "make gc        remove what crashed runs left behind"

setup:
	@scripts/setup.sh

setup-demo:
	@scripts/setup.sh --demo

demo: setup-demo
	@t0=$$(date +%s); echo "[demo] starting a sandbox and running one episode of tabular-quality-basic with the rule agent"; \
	$(VENV)/bin/mlsandbox run --scenario tabular-quality-basic --agent rule --seed $(SEED) --name demo; \
	rc=$$?; echo "[demo] sandbox up, episode and sandbox down in $$(( $$(date +%s) - t0 )) s"; exit $$rc

test: setup
	@scripts/run-tests.sh

test-fast: setup
	@scripts/run-tests.sh -m "not services"

# Chaos Mesh on the real node (root): builds its binaries from its Go module first (about 40 minutes
# cold, cached after), then runs tests/node/test_node_chaos_mesh.py, which the default run leaves out.
node-chaos-test: setup
	@scripts/build-chaos-mesh.sh
	@MLSANDBOX_CHAOS_MESH=1 scripts/run-tests.sh -p no:randomly tests/node/test_node_chaos_mesh.py

bench: setup
	@mkdir -p .bench
	$(PY) benchmarks/bench_foundation.py
	$(PY) benchmarks/bench_data.py
	$(PY) benchmarks/bench_interfaces.py
	$(PY) benchmarks/bench_faults.py
	$(PY) benchmarks/bench_serving.py
	$(PY) benchmarks/bench_kube.py
	$(PY) benchmarks/bench_sim.py
	$(PY) benchmarks/bench_integrations.py

# The whole catalogue's validation (CI plays its representative sample): every family's reference agent
# succeeds and the cheap strategies fail, on sim and on local (an ephemeral sandbox): .bench/catalog.json.
bench-catalog: setup
	@mkdir -p .bench
	$(PY) benchmarks/bench_catalog.py --backend sim --backend local

# Soak and load on one ephemeral sandbox each: .bench/soak.json and .bench/load.json (about 25 minutes).
bench-reliability: setup
	@mkdir -p .bench
	$(PY) benchmarks/bench_soak.py
	$(PY) benchmarks/bench_load.py --sessions 1 4 16

# The published benchmark results: .bench/ is ignored by git, benchmarks/results/ is committed and the site's
# "Benchmark results" page is generated from it (docs/hooks/reference.py).
bench-publish:
	@ls .bench/*.json >/dev/null 2>&1 || { echo "bench-publish: no .bench/*.json: run make bench first" >&2; exit 1; }
	@mkdir -p benchmarks/results
	cp .bench/*.json benchmarks/results/
	@echo "bench-publish: $$(ls .bench/*.json | wc -l) files in benchmarks/results/; commit them to publish"

# The documentation site (mkdocs.yml, docs/): the reference pages are generated at build time.
DOCS_ENV := NO_MKDOCS_2_WARNING=1

docs: setup
	$(DOCS_ENV) $(VENV)/bin/mkdocs build --strict --site-dir site

docs-serve: setup
	$(DOCS_ENV) $(VENV)/bin/mkdocs serve --strict

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

gc: setup
	$(VENV)/bin/mlsandbox gc

clean:
	rm -rf .pytest_cache .ruff_cache .bench build dist site src/*.egg-info

include kube.mk
