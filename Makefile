# Two commands set everything up on a fresh machine with Python 3.11+ and make:
#   make test   lint, type-check and test (bootstraps .venv)
#   make demo   the example shop on three instances (bootstraps .venv)
#               make demo DATABASE_URL=postgresql://... REDIS_URL=redis://... on real servers

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
UV := $(shell command -v uv 2>/dev/null)

.PHONY: test lint typecheck pytest demo clean

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

test: lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy src
	$(BIN)/mypy --strict tests/typing examples/shop/shop

pytest: $(STAMP)
	$(BIN)/pytest $(PYTEST_ARGS)

demo: $(STAMP)
	$(BIN)/python examples/shop/demo.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
