# The two commands of the README: `make dev` (start everything) and `make test` (the full suite).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: dev test lint install clean

$(STAMP): pyproject.toml sdk/python/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev,spark]"
	$(BIN)/pip install --quiet -e sdk/python
	touch $(STAMP)

install: $(STAMP)

dev: $(STAMP)
	$(BIN)/queuecore dev

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	cd sdk/python && ../../$(BIN)/mypy  # the SDK, as old a Python as this mypy checks (3.10)

# Test files are shared among PYTEST_WORKERS processes (pytest-xdist, a file to one worker): each
# worker starts its own PostgreSQL, SeaweedFS and Redis. PYTEST_WORKERS=0 runs them in this one.
PYTEST_WORKERS ?= 2
test: lint
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile

clean:
	rm -rf $(VENV) .queuecore .pytest_cache .mypy_cache .ruff_cache
