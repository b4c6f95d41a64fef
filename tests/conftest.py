"""Shared fixtures: the real sample models and the databases the suite runs against."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.models import GEMMA3, SMOLLM2, SampleModel, unavailable_reason


def _sample(model: SampleModel) -> Path:
    reason = unavailable_reason(model)
    if reason is not None:
        pytest.skip(reason)
    return model.path


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """SmolLM2-135M-Instruct.Q4_1.gguf (llama, Q4_1 + Q8_0 + F32)."""
    return _sample(SMOLLM2)


@pytest.fixture(scope="session")
def gemma3_path() -> Path:
    """gemma-3-270m-q4_k_m.gguf (gemma3, Q8_0 + Q5_0 + Q4_K + Q6_K + F32)."""
    return _sample(GEMMA3)


@pytest.fixture(scope="session", params=["smollm2", "gemma3"])
def sample_model_path(request: pytest.FixtureRequest) -> Path:
    return _sample(SMOLLM2 if request.param == "smollm2" else GEMMA3)


@pytest.fixture
def cli_db_url(empty_db_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """An empty database of each dialect as the CLI's catalog (`empty_db_url` comes from
    tests.catalog.conftest, imported where it is used), run from a folder without a
    config/registry.toml."""
    monkeypatch.setenv("REGISTRY_DATABASE_URL", empty_db_url)
    monkeypatch.chdir(tmp_path)  # no config/registry.toml from the checkout
    return empty_db_url
