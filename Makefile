# Every target creates and uses ./.venv by itself, so a fresh clone needs only python3.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.bench-installed
DEMO_STAMP := $(VENV)/.demo-installed
LAB_STAMP := $(VENV)/.lab-installed

.PHONY: venv demo lab test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $(STAMP)

# The bench extra (the LangGraph baseline) is installed only for `make bench`.
$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(BIN)/pip install --quiet -e ".[dev,bench]"
	touch $(BENCH_STAMP)

venv: $(STAMP)

# The demo needs only the runtime and the export extra, not `dev` (JupyterLab, Playwright,
# mypy...). Its own stamp, so `make test` still installs `dev` into the same venv afterwards.
$(DEMO_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -e ".[export]"
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/agentnb demo

# The notebooks in JupyterLab: the lab extra (widgets, export, JupyterLab, a kernel) goes into
# the same venv, under its own stamp; JupyterLab opens with notebooks/ as its root.
$(LAB_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -e ".[lab]"
	touch $(LAB_STAMP)

lab: $(LAB_STAMP)
	$(BIN)/jupyter lab notebooks

test: $(STAMP)
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: $(BENCH_STAMP)
	$(BIN)/python benchmarks/bench_store.py
	$(BIN)/python benchmarks/bench_export.py
	$(BIN)/python benchmarks/bench_runtime.py
	$(BIN)/python benchmarks/bench_recovery.py
	$(BIN)/python benchmarks/bench_widgets.py
	$(BIN)/python benchmarks/bench_scale.py
	$(BIN)/python benchmarks/bench_sessions.py
	$(BIN)/python benchmarks/bench_subagents.py
	$(BIN)/python benchmarks/bench_stops.py
	$(BIN)/python benchmarks/bench_evals.py
	$(BIN)/python benchmarks/bench_postgres.py
	$(BIN)/python benchmarks/bench_server.py
	$(BIN)/python benchmarks/bench_mcp.py
	$(BIN)/python benchmarks/bench_otel.py

clean:
	rm -rf $(VENV) .agentnb .pytest_cache .mypy_cache .ruff_cache
