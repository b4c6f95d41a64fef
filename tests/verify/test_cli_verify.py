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


def test_a_catalog_artifact_verified_here_is_recorded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file `registry index` read is a catalog artifact: its verification is recorded as a
    verify job records one, and `show` says so; a file changed since is not recorded."""
    config = _config(tmp_path)
    folder = tmp_path / "models"
    folder.mkdir()
    path = write_tiny(folder / "mamba.gguf")
    assert main(["--config", config, "index", str(folder)]) == 0
    capsys.readouterr()
    assert main(["--config", config, "verify", str(path), "--json"]) == 3
    doc = json.loads(capsys.readouterr().out)
    recorded = doc["verification"]
    assert (recorded["artifact_id"], recorded["status"], recorded["reason"]) == (1, "skipped", "unsupported_architecture")
    assert recorded["sha256"] == doc["sha256"][0] and recorded["url"] == f"/v1/verifications/{recorded['id']}"
    assert recorded["finished_at"] is not None and recorded["details"]["message"] == doc["message"]

    assert main(["--config", config, "show", "1", "--json"]) == 0
    page = json.loads(capsys.readouterr().out)
    assert page["verification_status"] == "skipped" and page["latest_verification"] == recorded
    assert main(["--config", config, "show", "1"]) == 0
    assert f"skipped, {recorded['finished_at'][:16].replace('T', ' ')}" in capsys.readouterr().out

    assert main(["--config", config, "verify", str(path)]) == 3
    assert "  recorded    verification 2 of artifact 1 (registry show 1)" in capsys.readouterr().out

    write_tiny(path, nan=True)  # other bytes under the indexed name
    assert main(["--config", config, "verify", str(path), "--json"]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["verification"] is None
    assert "not recorded: the file is not the one the catalog indexed as artifact 1" in captured.err
    assert main(["--config", config, "show", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["latest_verification"]["id"] == 2

    elsewhere = write_tiny(tmp_path / "other.gguf")  # not in the catalog: nothing to record against
    assert main(["--config", config, "verify", str(elsewhere), "--json"]) == 3
    captured = capsys.readouterr()
    assert json.loads(captured.out)["verification"] is None and captured.err == ""
