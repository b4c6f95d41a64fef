"""`registry verify` on local files: exit status by verdict, JSON, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from registry.cli import main
from tests.verify.conftest import write_tiny


def _config(tmp_path: Path) -> str:
    cfg = tmp_path / "r.toml"
    cfg.write_text(f'[general]\ndata_dir = "{tmp_path / "data"}"\n')
    return str(cfg)


def test_skipped_model_exits_3_with_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_tiny(tmp_path / "mamba.gguf")
    assert main(["--config", _config(tmp_path), "verify", str(path), "--json", "--tensors"]) == 3
    doc = json.loads(capsys.readouterr().out)
    assert (doc["status"], doc["reason"]) == ("skipped", "unsupported_architecture")
    assert [t["name"] for t in doc["tensors"]] == [
        "token_embd.weight",
        "blk.0.ssm_in.weight",
        "output_norm.weight",
    ]


def test_failed_model_exits_1_with_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_tiny(tmp_path / "nan.gguf", nan=True)
    assert main(["--config", _config(tmp_path), "verify", str(path)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"failed: {path} (nonfinite_weights: ")
    assert "1 NaN/Inf values" in out


def test_missing_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", _config(tmp_path), "verify", str(tmp_path / "nope.gguf")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("registry: verify: ") and err.count("\n") == 1
