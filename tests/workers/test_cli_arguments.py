"""Bad arguments to `registry` commands: one clear line and a non-zero exit, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from registry.cli import main


@pytest.fixture(autouse=True)
def catalog(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("REGISTRY_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'catalog.db'}")
    monkeypatch.setenv("REGISTRY_HUB_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("REGISTRY_HUB_MAX_ATTEMPTS", "1")
    monkeypatch.chdir(tmp_path)  # no config/registry.toml from the checkout


def _exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse refusing an argument
        return int(exc.code or 0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["crawl", "--limit", "-1"], "--limit"),
        (["jobs", "--limit", "99999999999999999999"], "--limit"),
        (["search", "--min-context", "99999999999999999999"], "--min-context"),
        (["serve", "--port", "99999"], "--port"),
        (["serve", "--port", "-1"], "--port"),
        (["worker", "--concurrency", "0"], "--concurrency"),  # was taken as "the default"
        (["worker", "--concurrency", "-2"], "--concurrency"),  # was taken as 1
        (["run", "generate", "model.gguf", "--prompt", "x", "-n", "-3"], "-n"),
    ],
)
def test_out_of_range_numbers_are_refused_before_anything_runs(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _exit_code(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize("action", ["upgrade", "downgrade"])
def test_db_with_an_unknown_revision_says_so(action: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = _exit_code(["db", action, "no-such-revision"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("registry: db: ") and "no-such-revision" in err
    assert len(err.strip().splitlines()) == 1
