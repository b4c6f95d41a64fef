"""`registry index` output: file names are shown escaped, whatever bytes they hold."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from registry.cli import main
from tests.verify.conftest import write_tiny


def test_names_with_control_characters_and_undecodable_bytes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REGISTRY_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'catalog.db'}")
    monkeypatch.chdir(tmp_path)  # no config/registry.toml from the checkout
    folder = tmp_path / "models"
    folder.mkdir()
    write_tiny(folder / "ok.gguf")
    write_tiny(folder / "fake\nindexed  x\x1b[2J.gguf")
    write_tiny(Path(os.fsdecode(bytes(folder) + b"/caf\xe9.gguf")))
    (folder / "bad\r.gguf").write_bytes(b"")

    assert main(["index", str(folder), str(tmp_path / "gone\x1b]52;c;x\x07")]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        "error     local/models  bad\\x0d.gguf  (truncated: the file ends at 0 bytes, inside magic "
        "(field 'magic', offset 0))",
        "indexed   local/models  caf\\udce9.gguf",
        "indexed   local/models  fake\\x0aindexed  x\\x1b[2J.gguf",
        "indexed   local/models  ok.gguf",
    ]
    assert "\x1b" not in err and "gone\\x1b]52;c;x\\x07: no such file or folder" in err


def test_a_file_that_is_not_gguf_is_reported(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REGISTRY_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'catalog.db'}")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.bin").write_bytes(b"GGUF")
    assert main(["index", "model.bin", "missing.gguf", "missing-folder"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[:2] == [
        "registry: index: model.bin: not a .gguf file",
        "registry: index: missing-folder: no such file or folder",
    ]
