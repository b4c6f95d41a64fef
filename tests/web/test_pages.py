"""The web catalog's pages through the API's application on a real catalog: the search page's
sort and "runs in" controls keep a shared URL's filters and filter as the API does, and a hub
repo's files carry the commands that run them. Parsed HTML, not strings."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

import pytest

from registry.web.format import size
from tests.api.conftest import ApiClient, api, catalog, insert, make_api  # noqa: F401
from tests.catalog.factories import artifact, make_snapshot
from tests.web.conftest import db, db_url, postgresql_url, sqlite_url, temp_databases  # noqa: F401

pytestmark = pytest.mark.usefixtures("catalog")


class Page(HTMLParser):
    """Each element's tag and attributes, and the text of every `code` element."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.codes: list[str] = []
        self._in_code = False
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))
        self._in_code = tag == "code"
        if self._in_code:
            self.codes.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "code":
            self._in_code = False

    def handle_data(self, data: str) -> None:
        if self._in_code:
            self.codes[-1] += data

    def find(self, tag: str, **attrs: Any) -> list[dict[str, str | None]]:
        return [a for t, a in self.elements if t == tag and all(a.get(k) == v for k, v in attrs.items())]


async def _page(api: ApiClient, path: str) -> Page:  # noqa: F811
    reply = await api.get(path)
    assert reply.status == 200, (path, reply.body)
    assert reply.headers["Content-Type"].startswith("text/html")
    return Page(reply.body)


async def test_the_controls_keep_a_shared_urls_filters(api: ApiClient) -> None:  # noqa: F811
    page = await _page(api, "/?architecture=llama&sort=likes&max_memory=8GiB&memory_context=32K&q=tiny")
    hidden = {a["name"]: a["value"] for a in page.find("input", type="hidden")}
    assert hidden == {"architecture": "llama", "q": "tiny"}
    assert [o["value"] for o in page.find("option") if "selected" in o] == ["likes"]  # the sort in force
    assert page.find("input", id="max_memory", name="max_memory", value="8GiB")
    assert page.find("input", id="memory_context", name="memory_context", value="32K")
    assert page.find("label", **{"for": "sort"}) and page.find("label", **{"for": "max_memory"})


async def test_runs_in_filters_as_the_api_does(api: ApiClient) -> None:  # noqa: F811
    for query in ("max_memory=1MB", "max_memory=64GiB&memory_context=32K", "sort=parameter_count:asc"):
        page = await _page(api, f"/?{query}")
        listed = [a["value"] for a in page.find("input", type="checkbox", name="ids")]
        reply = await api.get(f"/v1/artifacts?{query}&limit=20")
        assert listed == [str(hit["id"]) for hit in reply.body["items"]], query


async def test_the_runs_in_filter_is_a_link_listing_what_the_api_lists(api: ApiClient) -> None:  # noqa: F811
    home = await api.get("/?architecture=llama")
    assert 'href="/?architecture=llama&amp;runs_in=llama.cpp"' in home.body
    page = await _page(api, "/?architecture=llama&runs_in=llama.cpp")
    listed = [a["value"] for a in page.find("input", type="checkbox", name="ids")]
    reply = await api.get("/v1/artifacts?architecture=llama&runs_in=llama.cpp&limit=20")
    assert listed == [str(hit["id"]) for hit in reply.body["items"]]


async def test_a_bad_control_value_is_refused_naming_it(api: ApiClient) -> None:  # noqa: F811
    reply = await api.get("/?max_memory=lots")
    assert reply.status == 400
    assert reply.headers["Content-Type"].startswith("text/html")
    assert "max_memory" in reply.body and "lots" in reply.body
    missing = await api.get("/artifacts/999999")
    assert missing.status == 404 and missing.headers["Content-Type"].startswith("text/html")
    assert "999999" in missing.body


async def test_a_hub_repos_files_carry_their_run_commands(api: ApiClient, insert: Any) -> None:  # noqa: F811
    await insert(make_snapshot("someone/Tiny-GGUF", artifacts=(artifact("tiny-Q4_K_M.gguf"),)))
    page = await _page(api, "/repos/someone/Tiny-GGUF")
    assert "llama-server -hf someone/Tiny-GGUF:Q4_K_M" in page.codes
    assert "ollama run hf.co/someone/Tiny-GGUF:Q4_K_M" in page.codes
    assert "huggingface-cli download someone/Tiny-GGUF tiny-Q4_K_M.gguf --local-dir ." in page.codes
    (script,) = page.find("script")  # the copy buttons: one script of this site, no inline code
    assert "defer" in script
    assert str(script["src"]).startswith("/static/web.js")


async def test_hostile_ids_stay_text_in_the_commands(api: ApiClient, insert: Any) -> None:  # noqa: F811
    await insert(make_snapshot("evil/x-GGUF", artifacts=(artifact("a<script>alert(1)</script>-Q4_K_M.gguf"),)))
    reply = await api.get("/repos/evil/x-GGUF")
    assert reply.status == 200
    assert "<script>alert(1)</script>" not in reply.body
    assert "a&lt;script&gt;alert(1)&lt;/script&gt;-Q4_K_M.gguf" in reply.body
    assert len(Page(reply.body).find("script")) == 1  # only the site's own


async def test_the_script_is_served_under_the_csp(api: ApiClient) -> None:  # noqa: F811
    page = await _page(api, "/")
    (script,) = page.find("script")
    reply = await api.get(str(script["src"]))
    assert reply.status == 200
    assert "clipboard" in reply.body
    home = await api.get("/")
    assert "script-src 'self'" in home.headers["Content-Security-Policy"]


async def _crawl(db: Any, **values: Any) -> int:  # noqa: F811
    from registry.catalog.models import Crawl

    async with db.sessions() as session, session.begin():
        row = Crawl(kind="hub", **values)
        session.add(row)
    return int(row.id)


async def test_the_crawls_pages_show_what_the_api_lists(api: ApiClient, db: Any) -> None:  # noqa: F811
    done = await _crawl(db, status="finished", counters={"repos_seen": 3, "files": 7},
                        errors=[{"repo": "evil/x", "error": "<script>alert(1)</script>"}])  # fmt: skip
    running = await _crawl(db, status="running", parameters={"author": "someone"})
    page = await _page(api, "/crawls")
    listed = [a["href"] for a in page.find("a") if str(a.get("href", "")).startswith("/crawls/")]
    assert listed == [f"/crawls/{running}", f"/crawls/{done}"]  # newest first, as /v1/crawls
    one = await api.get(f"/crawls/{done}")
    assert one.status == 200 and "<script>alert(1)</script>" not in one.body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in one.body and "repos seen" in one.body
    assert not Page(one.body).find("div", **{"data-refresh": "5"})  # a finished crawl stays put
    live = await _page(api, f"/crawls/{running}")
    assert live.find("div", **{"data-refresh": "5"})  # the script reloads a running crawl's page
    assert (await api.get("/crawls/424242")).status == 404
    paged = await _page(api, "/crawls?limit=1")
    (older,) = [a["href"] for a in paged.find("a", rel="next")]
    assert str(older).startswith("/crawls?limit=1&cursor=")
    assert [a["href"] for a in (await _page(api, str(older))).find("a") if a.get("href") == f"/crawls/{done}"]


async def test_the_jobs_page_lists_the_jobs(api: ApiClient) -> None:  # noqa: F811
    page = await _page(api, "/jobs")
    reply = await api.get("/v1/jobs")
    assert reply.status == 200
    rows = len(page.find("tr")) - 1 if page.find("tr") else 0
    assert rows == len(reply.body["items"])
    assert (await api.get("/jobs?status=bogus")).status == 400


async def test_the_artifact_page_sizes_memory_at_the_context_asked(api: ApiClient) -> None:  # noqa: F811
    reply = await api.get("/v1/artifacts/1?context=2048")
    assert reply.status == 200
    memory = reply.body["memory"]
    page = await _page(api, "/artifacts/1?context=2048")
    assert page.find("input", id="context", name="context", value="2048")
    html = (await api.get("/artifacts/1?context=2048")).body
    assert f"at {memory['tokens']} tokens" in html
    assert (await api.get("/artifacts/1?context=lots")).status == 400


async def test_the_quant_table_sizes_each_file_as_the_search_does(api: ApiClient) -> None:  # noqa: F811
    (hit,) = (await api.get("/v1/artifacts?limit=1&memory_context=32K&with_projector=0")).body["items"]
    assert hit["memory"] is not None
    html = (await api.get(f"/repos/{hit['repo']}?memory_context=65536&max_memory=1TiB")).body
    assert Page(html).find("input", id="memory_context", value="65536")
    assert {">Memory at 4K<", ">Memory at 32K<", ">Memory at 64K<", ">Fits 1.0 TiB at 64K<"} <= set(
        re.findall(r">[^<]+<", html)
    )
    assert f">{size(hit['memory']['bytes'])}" in html  # its file at 32K, as the search sized it
    assert (await api.get(f"/repos/{hit['repo']}?max_memory=lots")).status == 400
