"""Loaded sample models and the llama.cpp reference values made by make_reference.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from registry.runner import ModelFile, Tokenizer, Transformer, load_model, load_tokenizer

DATA = Path(__file__).resolve().parents[1] / "data" / "runner"


def reference(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / f"reference_{name}.json").read_text())
    return data


@pytest.fixture(scope="session")
def smollm2_file(smollm2_path: Path) -> ModelFile:
    return ModelFile.from_buffer(np.memmap(smollm2_path, mode="r"))


@pytest.fixture(scope="session")
def gemma3_file(gemma3_path: Path) -> ModelFile:
    return ModelFile.from_buffer(np.memmap(gemma3_path, mode="r"))


# Each model is dequantized once per session (0.5 and 1.1 GB of float32).
@pytest.fixture(scope="session")
def smollm2_model(smollm2_file: ModelFile) -> Transformer:
    return load_model(smollm2_file)


@pytest.fixture(scope="session")
def gemma3_model(gemma3_file: ModelFile) -> Transformer:
    return load_model(gemma3_file)


@pytest.fixture(scope="session")
def smollm2_tokenizer(smollm2_file: ModelFile) -> Tokenizer:
    return load_tokenizer(smollm2_file)


@pytest.fixture(scope="session")
def gemma3_tokenizer(gemma3_file: ModelFile) -> Tokenizer:
    return load_tokenizer(gemma3_file)


@pytest.fixture(scope="session", params=["smollm2", "gemma3"])
def sample_name(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture(scope="session")
def sample_tokenizer(request: pytest.FixtureRequest, sample_name: str) -> tuple[str, Tokenizer]:
    return sample_name, request.getfixturevalue(f"{sample_name}_tokenizer")


@pytest.fixture(scope="session")
def sample_model(request: pytest.FixtureRequest, sample_name: str) -> tuple[str, Transformer]:
    return sample_name, request.getfixturevalue(f"{sample_name}_model")
