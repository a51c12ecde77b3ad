# Two commands set everything up on a fresh machine with Python 3.11+ and make:
#   make test   lint, type-check, and every test with coverage (bootstraps .venv)
#   make demo   the example shop on three instances (bootstraps .venv)
#               make demo DATABASE_URL=postgresql://... REDIS_URL=redis://... on real servers

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
UV := $(shell command -v uv 2>/dev/null)

# the share of branches and lines the tests must reach (coverage of this package only)
COVERAGE_FLOOR ?= 90
# the test helpers that mypy --strict checks with the package (test bodies are not annotated)
TEST_HELPERS := tests/helpers.py tests/servers.py tests/store_benches.py tests/process_worker.py \
	tests/nemesis_worker.py

.PHONY: test lint typecheck coverage pytest demo clean

export DATABASE_URL REDIS_URL

$(STAMP): pyproject.toml
	@if [ -n "$(UV)" ]; then \
		uv venv --python $(PYTHON) $(VENV) && \
		uv pip install --python $(BIN)/python -e '.[dev,examples]'; \
	else \
		$(PYTHON) -m venv $(VENV) && \
		$(BIN)/python -m pip install --quiet --upgrade pip && \
		$(BIN)/python -m pip install --quiet -e '.[dev,examples]'; \
	fi
	@touch $(STAMP)

test: lint typecheck coverage

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy src
	$(BIN)/mypy --strict tests/typing examples/shop/shop
	MYPYPATH=tests $(BIN)/mypy --strict $(TEST_HELPERS)
	MYPYPATH=examples/gunicorn $(BIN)/mypy --strict examples/gunicorn/app.py examples/gunicorn/gunicorn.conf.py

coverage: $(STAMP)
	@echo "Tests start throwaway PostgreSQL and Redis servers unless LEASELOCK_TEST_POSTGRES_URL / LEASELOCK_TEST_REDIS_URL name yours"
	$(BIN)/coverage run -m pytest $(PYTEST_ARGS)
	$(BIN)/coverage report --fail-under=$(COVERAGE_FLOOR)

pytest: $(STAMP)
	$(BIN)/pytest $(PYTEST_ARGS)

demo: $(STAMP)
	$(BIN)/python examples/shop/demo.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
