# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck pytest docs bench bench-report install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/demo.py

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/python -m pytest -q -n auto

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir site

test: lint typecheck docs pytest

# The comparison baselines pin their own pydantic-ai: they get a virtualenv of their own, so the
# one `make test` uses keeps the newest pydantic-ai.
BENCH_VENV ?= .venv-bench
BENCH_BIN := $(BENCH_VENV)/bin

$(BENCH_BIN)/python:
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_BIN)/python -m pip install --quiet --upgrade pip

bench: $(STAMP) $(BENCH_BIN)/python
	$(BENCH_BIN)/python -m pip install --quiet -e '.[dev,bench]'
	$(BENCH_BIN)/python bench/replay.py
	$(BENCH_BIN)/python bench/replay.py bench/heldout
	$(BENCH_BIN)/python bench/summary_facts.py
	$(BENCH_BIN)/python bench/readback.py
	$(BIN)/python bench/overhead.py

# The benchmarks page's tables and charts (docs/benchmarks.md, docs/assets/benchmarks-*.svg), from
# fresh replays: the shared runs with the harness baselines, the held-out runs, clamp_fresh.
OPTIONS := --profile chat --profile 'chat(clamp_fresh=True)' --profile coding \
	--profile 'coding(clamp_fresh=False)' --profile long_horizon --profile 'long_horizon(clamp_fresh=True)'

bench-report: $(STAMP) $(BENCH_BIN)/python
	$(BENCH_BIN)/python -m pip install --quiet -e '.[dev,bench]'
	mkdir -p bench/out
	$(BENCH_BIN)/python bench/replay.py --json bench/out/shared.json > bench/out/shared.txt
	$(BENCH_BIN)/python bench/replay.py bench/heldout --json bench/out/heldout.json > bench/out/heldout.txt
	$(BENCH_BIN)/python bench/replay.py --no-harness --window 32000 --window 16000 $(OPTIONS) \
		--json bench/out/options.json > bench/out/options.txt
	$(BIN)/python bench/report.py --shared bench/out/shared.json --heldout bench/out/heldout.json \
		--options bench/out/options.json

clean:
	rm -rf $(VENV) $(BENCH_VENV) site .pytest_cache .mypy_cache .ruff_cache
