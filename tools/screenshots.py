"""The README's screenshots of the web catalog: the search page and a repo page over the
sample catalog, drawn by Debian's chromium through Playwright.

    python -m tools.screenshots            # writes docs/web-search.png and docs/web-repo.png

The two sample models (`make models`) are indexed into a catalog in a temporary folder and
served on loopback as `registry serve` serves them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
from pathlib import Path

from aiohttp import web

from registry.api.app import create_app
from registry.catalog.db import Database
from registry.config import load_settings

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / ".cache" / "models"
SAMPLES = ("SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf")
DESKTOP_WIDTH, DESKTOP_HEIGHT = 1280, 860


async def shoot(out: Path, chromium: str) -> list[Path]:
    from playwright.async_api import async_playwright

    from workers.index import index_paths

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "models"
        folder.mkdir()
        for name in SAMPLES:
            os.symlink((MODELS / name).resolve(), folder / name)
        url = f"sqlite+aiosqlite:///{Path(tmp) / 'registry.db'}"
        db = Database.from_url(url)
        await index_paths(db, [folder])
        runner = web.AppRunner(create_app(load_settings(env={"REGISTRY_DATABASE_URL": url}), db.sessions))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        base = f"http://{host}:{port}"
        written = []
        try:
            async with async_playwright() as p:
                browser = await p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
                page = await browser.new_page(viewport={"width": DESKTOP_WIDTH, "height": DESKTOP_HEIGHT})
                await page.goto(base + "/")
                written.append(out / "web-search.png")
                await page.screenshot(path=str(written[-1]))
                repo = await page.locator("a[href^='/repos/']").first.get_attribute("href")
                await page.goto(base + (repo or "/"))
                written.append(out / "web-repo.png")
                await page.screenshot(path=str(written[-1]))
                await browser.close()
        finally:
            await runner.cleanup()
            await db.dispose()
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = parser.parse_args(argv)
    missing = [name for name in SAMPLES if not (MODELS / name).exists()]
    if missing:
        print(f"sample models missing ({', '.join(missing)}): run `make models`", file=sys.stderr)
        return 1
    for path in asyncio.run(shoot(args.out, args.chromium)):
        print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
