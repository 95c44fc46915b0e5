# Every target creates and uses ./.venv by itself, so a fresh clone needs only python3.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.bench-installed
DEMO_STAMP := $(VENV)/.demo-installed
SERVE_STAMP := $(VENV)/.serve-installed
LAB_STAMP := $(VENV)/.lab-installed

.PHONY: venv demo serve lab test lint bench clean

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

PORT ?=
# The chat page with the demo's agent, on the embedded store the demo writes to (its sessions
# show up for user "demo"): the server extra under its own stamp, a sign-in token printed at
# start (revoked when the server stops). PORT= another port (0: a free one); STORE=URL another store.
STORE ?=
SERVE_USER ?= demo
$(SERVE_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -e ".[export,server]"
	touch $(SERVE_STAMP)

serve: $(SERVE_STAMP)
	$(BIN)/agentnb serve --agent agentnb.demo:agent --port $(or $(PORT),8000) --token-for $(SERVE_USER) $(if $(STORE),--store $(STORE))

# The notebooks in JupyterLab: the lab extra (everything the tutorials use, JupyterLab, a
# kernel) goes into the same venv, under its own stamp; JupyterLab opens with notebooks/ as its
# root. `make lab PORT=8888 ARGS="--no-browser --IdentityProvider.token=..."`; as root (a
# container) it adds --allow-root, which Jupyter otherwise requires.
ARGS ?=
LAB_ROOT := $(shell [ "$$(id -u 2>/dev/null)" = 0 ] && echo --allow-root)
$(LAB_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -e ".[lab]"
	touch $(LAB_STAMP)

lab: $(LAB_STAMP)
	$(BIN)/jupyter lab notebooks $(if $(PORT),--port=$(PORT)) $(LAB_ROOT) $(ARGS)

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
	$(BIN)/python benchmarks/bench_middleware.py
	$(BIN)/python benchmarks/bench_postgres.py
	$(BIN)/python benchmarks/bench_server.py
	$(BIN)/python benchmarks/bench_mcp.py
	$(BIN)/python benchmarks/bench_otel.py

clean:
	rm -rf $(VENV) .agentnb .pytest_cache .mypy_cache .ruff_cache
