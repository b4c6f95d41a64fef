"""The docs stay true to the code: generated pages current, links resolving, the front page short."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tools import gendocs

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("name", sorted(gendocs.PAGES))
def test_generated_page_is_current(name: str) -> None:
    committed = (gendocs.DOCS / name).read_text(encoding="utf-8")
    assert committed == gendocs.PAGES[name](), f"docs/{name} is out of date: run `make docs`"


def test_every_command_and_setting_has_a_section() -> None:
    from registry.cli import build_parser
    from registry.config import describe

    _, handlers = build_parser()
    cli = (gendocs.DOCS / "cli.md").read_text(encoding="utf-8")
    assert all(f"\n## registry {name}\n" in cli for name in handlers)
    configuration = (gendocs.DOCS / "configuration.md").read_text(encoding="utf-8")
    assert all(f"### `{s.section}.{s.key}`" in configuration for s in describe())


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    targets = [t for t in LINK.findall(text) if "://" not in t and not t.startswith("mailto:")]
    missing = [t for t in targets if not (page.parent / t).exists()]
    assert not missing, f"{page.relative_to(ROOT)} links to missing files: {missing}"


def test_readme_is_a_front_page_with_two_quick_start_commands() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) < 150
    quick = text.split("## Quick start", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in quick.strip().splitlines()]
    assert commands == ["make run", "make test"]
