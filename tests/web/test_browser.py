"""The web catalog in a real browser: Debian's chromium driven by Playwright (by path; no
browser is ever downloaded), axe-core in every page.

Walks search -> repo -> artifact -> tree -> compare on the sample catalog (the two real
sample models, indexed from a folder) and on a synthetic catalog with lineage and a real
GGUF file whose metadata holds HTML and script payloads; with JavaScript on and off. Every
page: no console error, no serious or critical axe violation, a screenshot under
test-output/browser/. The payloads must show as text and run nothing.

Skips only when chromium (or the Playwright package) is missing outside CI; with `CI` set
it fails instead.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp import web

from registry.api.app import create_app
from registry.catalog import migrate
from registry.catalog.db import Database
from registry.catalog.models import Verification
from registry.catalog.services import upsert_repo_snapshot
from registry.catalog.snapshot import LineageRecord
from registry.config import load_settings
from tests.catalog.factories import make_snapshot
from workers.index import index_paths

ROOT = Path(__file__).resolve().parents[2]
OUTPUT = ROOT / "test-output" / "browser"
SERIOUS = {"serious", "critical"}
# Sets a flag, opens a dialog, or breaks out of an attribute or a tag if anything renders it
# as markup; the flag stays unset and no dialog opens when it is shown as text.
PAYLOAD = ('<script>window.__pwned=1</script><img src=x onerror="window.__pwned=1;alert(1)">'
           '"><svg onload=alert(1)>{{7*7}}')  # fmt: skip
PAYLOAD_TEXT = "<script>window.__pwned=1</script>"


def _missing(what: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{what} is missing in CI: `make setup` installs it")
    pytest.skip(f"{what} is not installed here (`make setup` installs it)")


def chromium_path() -> str:
    path = os.environ.get("REGISTRY_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not os.path.exists(path):
        _missing("chromium")
    return path


try:
    from axe_playwright_python.async_playwright import Axe
    from playwright.async_api import Browser, ConsoleMessage, Dialog, Page, async_playwright
except ImportError:  # pragma: no cover - setup installs both
    Axe = None


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    if Axe is None:
        _missing("the Python packages playwright and axe-playwright-python")
    path = chromium_path()
    async with async_playwright() as p:
        # --no-sandbox: CI runs as root, where chromium refuses its sandbox.
        b = await p.chromium.launch(executable_path=path, args=["--no-sandbox"])
        try:
            yield b
        finally:
            await b.close()


def write_hostile_gguf(path: Path) -> Path:
    """A real GGUF file with payloads in every string a page shows."""
    import gguf

    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(PAYLOAD)
    writer.add_string("general.license", PAYLOAD)
    writer.add_string("general.description", PAYLOAD)
    writer.add_string("general.base_model.0.name", PAYLOAD)
    writer.add_string("general.base_model.0.repo_url", "javascript:alert(1)")
    writer.add_chat_template(
        "{{ '" + PAYLOAD.replace("'", "") + "' }}{% for m in messages %}{{ m.content }}{% endfor %}"
    )
    writer.add_context_length(2048)
    writer.add_tensor("blk.0.attn_q.weight", np.ones((4, 32), dtype=np.float32))
    writer.add_tensor("<b>tensor</b>.weight", np.ones((4, 32), dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


async def synthetic_lineage(db: Database) -> None:
    """A base model with more children than the tree draws, grandchildren of every relation,
    and a repo whose card is all payload."""
    snaps = [make_snapshot("base/Model")]
    for i in range(12):
        snaps.append(
            make_snapshot(
                f"quants/Model-{i:02d}-GGUF", lineage=(LineageRecord("base/Model", "quantized", "tags"),)
            )
        )
    for i, relation in enumerate(("finetune", "adapter", "merge", "unknown")):
        snaps.append(make_snapshot(f"tuners/Model-{relation}",
                                   lineage=(LineageRecord("quants/Model-00-GGUF", relation, ("card", "gguf")[i % 2]),)))  # fmt: skip
    snaps.append(make_snapshot("evil/Model", card_license=PAYLOAD, tags=("gguf", PAYLOAD),
                               lineage=(LineageRecord("base/Model", "finetune", "card"),)))  # fmt: skip
    for snap in snaps:
        async with db.sessions() as session, session.begin():
            await upsert_repo_snapshot(session, snap)


@dataclass
class Site:
    base: str
    db: Database


@pytest.fixture
async def serve(tmp_path: Path) -> AsyncIterator[Any]:
    """Serves a catalog of its own (a SQLite file) on loopback, as `registry serve` does."""
    runners: list[web.AppRunner] = []
    dbs: list[Database] = []

    async def start(name: str) -> Site:
        url = f"sqlite+aiosqlite:///{tmp_path / f'{name}.db'}"
        db = Database.from_url(url)
        dbs.append(db)
        await migrate.upgrade(db.engine)
        settings = load_settings(env={"REGISTRY_DATABASE_URL": url})
        runner = web.AppRunner(create_app(settings, db.sessions))
        await runner.setup()
        runners.append(runner)
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        return Site(f"http://{host}:{port}", db)

    yield start
    for runner in runners:
        await runner.cleanup()
    for db in dbs:
        await db.dispose()


@dataclass
class Visit:
    """One browser context's record: what went wrong while it browsed."""

    page: Page
    label: str
    js: bool
    errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)


async def open_visit(browser: Browser, label: str, js: bool) -> Visit:
    context = await browser.new_context(java_script_enabled=js, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(30_000)  # a page that never loads fails the test, not hangs it
    page = await context.new_page()
    visit = Visit(page, f"{label}-{'js' if js else 'nojs'}", js)

    def console(msg: ConsoleMessage) -> None:
        if msg.type == "error":
            visit.errors.append(f"console: {msg.text} at {page.url}")

    async def dialog(d: Dialog) -> None:
        visit.dialogs.append(d.message)
        await d.dismiss()

    page.on("console", console)
    page.on("pageerror", lambda exc: visit.errors.append(f"page error: {exc} at {page.url}"))
    page.on("dialog", dialog)
    return visit


async def check(visit: Visit, name: str) -> None:
    """The page loaded, passes axe without serious or critical findings, ran nothing it should
    not; its screenshot is saved."""
    page = visit.page
    OUTPUT.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(OUTPUT / f"{visit.label}-{name}.png"), full_page=True)
    if visit.js:  # axe runs as a script in the page; with scripts off it cannot (the HTML is the same)
        results = await Axe().run(page)
        bad = [(v["id"], v["impact"], [n["target"] for n in v["nodes"]][:3]) for v in results.response["violations"]
               if v["impact"] in SERIOUS]  # fmt: skip
        assert not bad, f"{name} ({page.url}): {bad}"
    assert visit.errors == [], visit.errors
    assert visit.dialogs == []
    if visit.js and await page.evaluate("() => typeof window.__pwned") != "undefined":
        pytest.fail(f"a payload ran on {page.url}")


async def follow(visit: Visit, base: str, pattern: str, name: str) -> str:
    """Open the first link of the page whose href matches `pattern`; it must answer 200."""
    hrefs = [h for h in await visit.page.locator("a[href]").evaluate_all("els => els.map(e => e.getAttribute('href'))")
             if re.match(pattern, h)]  # fmt: skip
    assert hrefs, f"no link like {pattern} on {visit.page.url}"
    await goto(visit, base, hrefs[0], name)
    return hrefs[0]


async def goto(visit: Visit, base: str, path: str, name: str) -> None:
    response = await visit.page.goto(base + path)
    assert response is not None and response.status == 200, (path, response and response.status)
    await check(visit, name)


async def walk(visit: Visit, base: str, repo: str | None = None) -> None:
    """search -> repo -> artifact -> tree -> compare, by the pages' own links where they have them."""
    await goto(visit, base, "/", "search")
    if repo is None:
        await follow(visit, base, r"^/repos/", "repo")
    else:
        await goto(visit, base, f"/repos/{repo}", "repo")
    await follow(visit, base, r"^/tree/", "tree")
    await goto(visit, base, "/", "search-again")
    await follow(visit, base, r"^/artifacts/\d+", "artifact")
    await goto(visit, base, visit.page.url.removeprefix(base) + "?context=32K&cache_type=q8_0", "artifact-memory")
    await goto(visit, base, "/", "search-for-compare")
    ids = re.findall(r'href="/artifacts/(\d+)"', await visit.page.content())
    assert len(set(ids)) >= 2, "the search lists fewer than two artifacts"
    await goto(visit, base, f"/compare?ids={','.join(sorted(set(ids))[:2])}", "compare")
    await follow(visit, base, r"^/crawls$", "crawls")  # the operations pages, from the site's header
    await follow(visit, base, r"^/jobs$", "jobs")
    await follow(visit, base, r"^/verifications$", "verifications")
    await follow(visit, base, r"^/signin$", "signin")


@pytest.mark.parametrize("js", [True, False], ids=["js", "nojs"])
async def test_sample_catalog(browser: Browser, serve: Any, tmp_path: Path, smollm2_path: Path,
                              gemma3_path: Path, js: bool) -> None:  # fmt: skip
    folder = tmp_path / "samples"
    folder.mkdir()
    for path in (smollm2_path, gemma3_path):
        os.symlink(path, folder / path.name)
    site = await serve("samples")
    await index_paths(site.db, [folder])
    visit = await open_visit(browser, "samples", js)
    await walk(visit, site.base)
    await goto(visit, site.base, "/", "search-samples")
    text = await visit.page.inner_text("body")
    assert smollm2_path.name in text and gemma3_path.name in text


@pytest.mark.parametrize("js", [True, False], ids=["js", "nojs"])
async def test_lineage_and_hostile_metadata(browser: Browser, serve: Any, tmp_path: Path, js: bool) -> None:
    site = await serve("lineage")
    await synthetic_lineage(site.db)
    await index_paths(site.db, [write_hostile_gguf(tmp_path / "hostile" / "evil.gguf").parent])
    visit = await open_visit(browser, "lineage", js)
    await walk(visit, site.base, repo="quants/Model-00-GGUF")

    # The tree of the base model: ancestors none, children beyond the width behind "more".
    await goto(visit, site.base, "/tree/base/Model", "tree-base")
    page = visit.page
    assert await page.locator("svg.lineage-graph").count() == 1
    more = page.locator("svg a.tree-more")
    assert await more.count() == 1
    assert "more" in (await page.inner_text("main"))
    for relation in ("quantized", "finetune"):
        assert relation in await page.inner_text("main")
    href = await more.first.get_attribute("href")
    assert href and href.startswith("/tree/base/Model/more?")
    await goto(visit, site.base, href, "tree-more")
    assert "quants/Model-11-GGUF" in await page.inner_text("main")

    # Payloads show as text and run nothing, on every page that shows them.
    await goto(visit, site.base, "/?q=evil", "hostile-search")
    await goto(visit, site.base, "/repos/evil/Model", "hostile-card")
    assert PAYLOAD_TEXT in await page.inner_text("main")
    await goto(visit, site.base, "/", "hostile-home")
    hostile = [h for h in re.findall(r'href="(/artifacts/\d+)"', await page.content())]
    for path in hostile:
        await goto(visit, site.base, path, "hostile-artifact")
        if PAYLOAD_TEXT in await page.inner_text("main"):
            break
    else:
        pytest.fail("the hostile file's name is on none of the artifact pages")
    assert await page.locator("a[href^='javascript:']").count() == 0

    # A finished verification's page, its generated text a payload.
    async with site.db.sessions() as session, session.begin():
        row = Verification(artifact_id=int(path.rsplit("/", 1)[1]), status="passed", generated=PAYLOAD,
                           tensors_checked=3, nonfinite_values=0, perplexity=12.5, timings={"download": 0.5})
        session.add(row)
        await session.flush()
        verification_id = row.id
    await goto(visit, site.base, f"/verifications/{verification_id}", "verification")
    assert PAYLOAD_TEXT in await page.inner_text("main")
    await goto(visit, site.base, "/verifications?status=passed", "verifications-passed")
    assert await page.locator(f"a[href='/verifications/{verification_id}']").count() == 1
    # The hostile file's tensor table, its names payloads too, a page at a time.
    await goto(visit, site.base, f"{path}?name=blk", "hostile-tensors")
    assert await page.locator("#tensors-h").count() == 1
