"""The code stays in modules a reader can hold in mind: none in `registry/` or `workers/` over
`MAX_LINES` lines. A module that grows past it is split by job (see docs/architecture.md),
not given an exception."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 800


def _modules() -> list[Path]:
    return sorted(p for top in ("registry", "workers") for p in (ROOT / top).rglob("*.py"))


def test_the_tree_has_modules_to_check() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in _modules()}
    assert {"registry/config.py", "workers/crawl.py"} <= names


def test_no_module_is_over_the_line_limit() -> None:
    long = {}
    for path in _modules():
        with path.open("rb") as f:
            lines = sum(1 for _ in f)
        if lines > MAX_LINES:
            long[path.relative_to(ROOT).as_posix()] = lines
    assert not long, f"modules over {MAX_LINES} lines (split them by job): {long}"
