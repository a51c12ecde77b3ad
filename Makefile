# Two commands set everything up on a fresh machine with Python 3.11+ and make:
#   make test   lint, type-check, build the docs site, and every test with coverage (bootstraps .venv)
#   make demo   the example shop on three instances (bootstraps .venv)
#               make demo DATABASE_URL=postgresql://... REDIS_URL=redis://... on real servers
#               make demo DEMO_PORTS=3101,3102,3103 when 3001-3003 are taken

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
UV := $(shell command -v uv 2>/dev/null)

# the share of branches and lines the tests must reach (coverage of this package only)
COVERAGE_FLOOR ?= 90
# the test helpers that mypy --strict checks with the package (test bodies are not annotated)
TEST_HELPERS := \
	tests/browser.py \
	tests/check_stores.py \
	tests/dashboard_client.py \
	tests/doc_blocks.py \
	tests/doc_context.pyi \
	tests/doc_runs.py \
	tests/doc_servers.py \
	tests/doc_typecheck.py \
	tests/etcd_cluster.py \
	tests/etcd_relays.py \
	tests/etcd_server.py \
	tests/helpers.py \
	tests/mysql_replicas.py \
	tests/mysql_server.py \
	tests/orm_shop.py \
	tests/postgres_replicas.py \
	tests/process_worker.py \
	tests/redis_replicas.py \
	tests/servers.py \
	tests/sim_jobs.py \
	tests/store_benches.py

.PHONY: test lint typecheck docs coverage pytest demo bench clean

export DATABASE_URL REDIS_URL DEMO_PORTS

$(STAMP): pyproject.toml
	@echo "Setting up $(VENV) with leaselock and its development tools (the first time: about a minute)"
	@if [ -n "$(UV)" ]; then \
		uv venv --python $(PYTHON) $(VENV) && \
		uv pip install --python $(BIN)/python -e . --group dev --group examples --group docs; \
	else \
		$(PYTHON) -m venv $(VENV) && \
		echo "  upgrading pip (dependency groups need pip 25.1 or later)" && \
		$(BIN)/python -m pip install --quiet --upgrade pip && \
		echo "  installing leaselock, the test tools, the docs' builder and the example shop's packages" && \
		$(BIN)/python -m pip install -e . --group dev --group examples --group docs; \
	fi
	@touch $(STAMP)
	@echo "$(VENV) is ready"

test: lint typecheck docs coverage

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy src
	$(BIN)/mypy --strict tests/typing examples/shop/shop
	MYPYPATH=tests $(BIN)/mypy --strict $(TEST_HELPERS)
	MYPYPATH=examples/gunicorn $(BIN)/mypy --strict examples/gunicorn/app.py examples/gunicorn/gunicorn.conf.py
	MYPYPATH=examples/celery $(BIN)/mypy --strict examples/celery/tasks.py
	$(BIN)/python tests/doc_typecheck.py

# the site of docs/ (mkdocs.yml), into build/site; --strict fails on a page left out of the nav
# and on a link to a missing page or anchor (not with --quiet: it hides the warnings, and then
# passes); NO_MKDOCS_2_WARNING hushes the theme's banner.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# two test processes: most of a run's time is spent waiting on real servers and processes (a
# ttl to pass, a failover, a nemesis), and two workers wait at once; each starts its own servers
TEST_WORKERS ?= 2

coverage: $(STAMP)
	@echo "Tests start throwaway PostgreSQL and Redis servers unless LEASELOCK_TEST_POSTGRES_URL / LEASELOCK_TEST_REDIS_URL name yours"
	$(BIN)/pytest -n $(TEST_WORKERS) --cov=leaselock --cov-report=term:skip-covered \
		--cov-fail-under=$(COVERAGE_FLOOR) --durations=15 $(PYTEST_ARGS)

pytest: $(STAMP)
	$(BIN)/pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)

demo: $(STAMP)
	$(BIN)/python examples/shop/demo.py

# every benchmark, each printing leaselock beside its floor or peer from the same run, on the
# servers named by LEASELOCK_TEST_POSTGRES_URL / LEASELOCK_TEST_REDIS_URL (else the local ones)
BENCH_STAMP := $(VENV)/.bench-installed
$(BENCH_STAMP): $(STAMP) pyproject.toml
	@if [ -n "$(UV)" ]; then \
		uv pip install --python $(BIN)/python --group bench; \
	else \
		$(BIN)/python -m pip install --quiet --group bench; \
	fi
	@touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(BIN)/python benchmarks/bench_engine.py
	$(BIN)/python benchmarks/bench_redis.py
	$(BIN)/python benchmarks/bench_postgres.py
	$(BIN)/python benchmarks/bench_postgres_renew_batches.py
	$(BIN)/python benchmarks/bench_postgres_listeners.py
	$(BIN)/python benchmarks/bench_orm_fencing.py
	$(BIN)/python benchmarks/bench_sqlite.py
	$(BIN)/python benchmarks/bench_mysql.py
	$(BIN)/python benchmarks/bench_etcd.py
	$(BIN)/python benchmarks/bench_redis_cluster.py
	$(BIN)/python benchmarks/bench_handoff.py
	$(BIN)/python benchmarks/bench_contention.py
	$(BIN)/python benchmarks/bench_contention.py --in-process
	$(BIN)/python benchmarks/bench_renewals.py
	$(BIN)/python benchmarks/bench_renewals.py --stores redis --sync
	$(BIN)/python benchmarks/bench_election_takeover.py
	$(BIN)/python benchmarks/fleet.py
	$(BIN)/python benchmarks/bench_simulate.py --processes 2
	$(BIN)/python benchmarks/bench_dashboard.py --stores sqlite,redis,postgres

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache build/doc_blocks build/site
