# The one entry point: setup, run, test, lint, fuzz, bench.
# Every target sets up what it needs, so each works on a fresh machine.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
MODELS := .cache/models
SAMPLES := $(MODELS)/SmolLM2-135M-Instruct.Q4_1.gguf $(MODELS)/gemma-3-270m-q4_k_m.gguf

.PHONY: setup chromium models run test lint docs fuzz bench refvenv clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

# Chromium for the web catalog's browser tests: Debian's package where it is missing
# (Playwright drives it by path and never downloads a browser of its own).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
chromium:
	command -v chromium >/dev/null || ($(SUDO) apt-get update && $(SUDO) apt-get install -y chromium)

setup: $(STAMP) chromium

$(SAMPLES): | $(STAMP)
	$(BIN)/python -m tests.models fetch

models: $(SAMPLES)

# The product on its embedded default (SQLite under data/): catalog the sample models,
# then serve the API with in-process crawls, verifications and the crawl schedule.
run: models
	$(BIN)/registry index $(MODELS)
	@echo "Web catalog on http://127.0.0.1:8080/ - the API under /v1 (/v1/artifacts, /openapi.json); Ctrl-C stops it"
	$(BIN)/registry serve

test: models
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

# The generated reference pages of docs/ (tests/test_docs.py fails when they are stale).
docs: $(STAMP)
	$(BIN)/python -m tools.gendocs

fuzz: models
	REGISTRY_FUZZ_EXAMPLES=20000 $(BIN)/python -m pytest tests/gguf/test_fuzz.py -q

# Each benchmark runs this project side by side with its peers and prints the ratios.
bench: models
	$(BIN)/python -m bench.parse
	$(BIN)/python -m bench.dequant
	$(BIN)/python -m bench.search
	$(BIN)/python -m bench.api
	$(BIN)/python -m bench.web
	$(BIN)/python -m bench.crawl
	$(BIN)/python -m bench.verify

# The peers of the benchmarks and of the optional live cross-checks against ggml's C code:
# llama-cpp-python (builds llama.cpp from source, several minutes) in a virtualenv of its own.
# Built for this CPU, but without AMX: ggml's AMX matrix multiply crashed (SIGSEGV in
# ggml_backend_amx_mul_mat) on the first forward pass of both sample models on a Sapphire
# Rapids VM, and the benchmarks' peer has to run. No wheel cache: a wheel built elsewhere
# with other flags would be reused.
REFVENV := .cache/refvenv
REF_CFLAGS := -mno-amx-tile -mno-amx-int8 -mno-amx-bf16
$(REFVENV)/.installed:
	$(PYTHON) -m venv $(REFVENV)
	$(REFVENV)/bin/python -m pip install -q --upgrade pip
	CMAKE_ARGS="-DCMAKE_C_FLAGS='$(REF_CFLAGS)' -DCMAKE_CXX_FLAGS='$(REF_CFLAGS)'" \
		$(REFVENV)/bin/python -m pip install -q --no-cache-dir llama-cpp-python numpy
	touch $@

refvenv: $(REFVENV)/.installed

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
