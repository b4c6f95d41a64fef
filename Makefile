# The one entry point: setup, run, test, lint, fuzz, bench.
# Every target sets up what it needs, so each works on a fresh machine.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
MODELS := .cache/models
SAMPLES := $(MODELS)/SmolLM2-135M-Instruct.Q4_1.gguf $(MODELS)/gemma-3-270m-q4_k_m.gguf

.PHONY: setup models run test lint fuzz bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

$(SAMPLES): | $(STAMP)
	$(BIN)/python -m tests.models fetch

models: $(SAMPLES)

# The product on its embedded default: inspect the sample models.
run: models
	$(BIN)/registry inspect $(MODELS)/SmolLM2-135M-Instruct.Q4_1.gguf
	$(BIN)/registry inspect $(MODELS)/gemma-3-270m-q4_k_m.gguf

test: models
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

fuzz: models
	REGISTRY_FUZZ_EXAMPLES=20000 $(BIN)/python -m pytest tests/gguf/test_fuzz.py -q

bench: models
	$(BIN)/python bench/parse.py
	$(BIN)/python bench/dequant.py
	$(BIN)/python bench/search.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
