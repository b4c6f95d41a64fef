"""The verifications list (`GET /v1/verifications` and its page), the memory estimate on an
artifact's page part by part, the repo page's llama.cpp column, and the web forms' blank
fields, through the API's application on a real catalog of the sample models."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from registry.gguf.compat import finding
from registry.gguf.facts import derive_facts
from registry.hub.local import read_header
from tests.api.conftest import ApiClient, api, catalog, insert, make_api  # noqa: F401
from tests.catalog.factories import artifact, make_snapshot
from tests.web.conftest import db, db_url, postgresql_url, sqlite_url, temp_databases  # noqa: F401
from tests.web.test_pages import _page

pytestmark = pytest.mark.usefixtures("catalog")


async def _verification(db: Any, artifact_id: int, **values: Any) -> int:  # noqa: F811
    from registry.catalog.models import Verification

    async with db.sessions() as session, session.begin():
        row = Verification(artifact_id=artifact_id, **values)
        session.add(row)
    return int(row.id)


async def test_verifications_are_listed_newest_first_filtered_and_paged(api: ApiClient, db: Any) -> None:  # noqa: F811
    (first, second) = [a["id"] for a in (await api.get("/v1/artifacts?sort=name")).body["items"][:2]]
    passed = await _verification(db, first, status="passed", perplexity=7.5, tensors_checked=272)
    failed = await _verification(db, second, status="failed", reason="<script>alert(1)</script>")
    queued = await _verification(db, first, status="queued")
    listed = await api.get("/v1/verifications")
    assert listed.status == 200
    assert [v["id"] for v in listed.body["items"]] == [queued, failed, passed]
    assert [v["id"] for v in (await api.get("/v1/verifications?status=passed")).body["items"]] == [passed]
    assert [v["id"] for v in (await api.get(f"/v1/verifications?artifact={first}")).body["items"]] == [queued, passed]
    paged = await api.get("/v1/verifications?limit=2")
    assert [v["id"] for v in paged.body["items"]] == [queued, failed] and paged.body["next"]
    assert 'rel="next"' in paged.headers["Link"]
    rest = await api.get(f"/v1/verifications?limit=2&cursor={paged.body['next']}")
    assert [v["id"] for v in rest.body["items"]] == [passed] and rest.body["next"] is None
    assert (await api.get("/v1/verifications?status=bogus")).status == 400
    assert (await api.get("/v1/verifications?artifact=0")).status == 400

    page = await _page(api, "/verifications")
    links = [a["href"] for a in page.find("a") if str(a.get("href", "")).startswith("/verifications/")]
    assert links == [f"/verifications/{queued}", f"/verifications/{failed}", f"/verifications/{passed}"]
    html = (await api.get("/verifications")).body
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "7.50" in html
    assert page.find("a", href="/verifications")  # in the header's navigation
    only = await _page(api, f"/verifications?status=&artifact={first}")  # a blank field is no filter
    assert [a["href"] for a in only.find("a") if str(a.get("href", "")).startswith("/verifications/")] == [
        f"/verifications/{queued}", f"/verifications/{passed}"
    ]
    assert (await api.get("/verifications?status=bogus")).status == 400


@pytest.fixture
async def real(insert: Any, smollm2_path: Path, gemma3_path: Path) -> str:  # noqa: F811
    """The sample models in one repo with the facts their headers give, as a crawl writes
    them: SmolLM2 checked with one warning, gemma-3 checked clean, a copy not checked."""
    records = []
    for path, compat in ((smollm2_path, (finding("L017", "tokenizer.ggml.eos_token_id", "none"),)),
                         (gemma3_path, ()), (gemma3_path, None)):  # fmt: skip
        facts = derive_facts([read_header(path).header], file_sizes=[path.stat().st_size])
        name = path.name if compat is not None else f"copy-{path.name}"
        records.append(dataclasses.replace(artifact(name, facts, size=path.stat().st_size),
                                           llama_cpp_findings=compat))  # fmt: skip
    await insert(make_snapshot("real/samples-GGUF", artifacts=tuple(records)))
    return "real/samples-GGUF"


async def test_the_artifact_page_shows_what_llama_cpp_allocates_part_by_part(api: ApiClient, real: str) -> None:  # noqa: F811
    rows = (await api.get(f"/v1/repos/{real}")).body["artifacts"]
    (smollm2,) = [a["id"] for a in rows if a["path"].startswith("SmolLM2")]
    plain = (await api.get(f"/v1/artifacts/{smollm2}")).body
    estimate = plain["memory_estimate"]
    assert plain["memory"]["basis"] == "llama.cpp"
    assert estimate["cpu"]["total"] == plain["memory"]["bytes"]  # the search's figure, at its settings
    for side in ("cpu", "gpu"):
        assert sum(estimate[side]["parts"].values()) == estimate[side]["total"]
    assert estimate["gpu"]["device"] + estimate["gpu"]["host"] == estimate["gpu"]["total"]
    q8 = (await api.get(f"/v1/artifacts/{smollm2}?context=8K&cache_type=q8_0&batch=256")).body["memory_estimate"]
    assert q8["cpu"]["settings"]["cache_type"] == "q8_0" and q8["cpu"]["settings"]["flash_attention"]
    assert q8["cpu"]["settings"]["ubatch"] == 256 and q8["tokens"] == 8192
    f16 = (await api.get(f"/v1/artifacts/{smollm2}?context=8K&flash_attention=1&batch=256")).body
    # q8_0 keeps 34 bytes per 32 values where f16 keeps 64
    assert q8["cpu"]["parts"]["kv_cache"] * 64 == f16["memory_estimate"]["cpu"]["parts"]["kv_cache"] * 34
    assert (await api.get(f"/v1/artifacts/{smollm2}?cache_type=q5_1")).status == 400
    assert (await api.get(f"/v1/artifacts/{smollm2}?batch=0")).status == 400
    # A row an older release wrote has no estimate in parts, and says how its memory was sized.
    (old,) = (await api.get("/v1/artifacts?sort=name&limit=1&q=llama-3-8b-f16")).body["items"]
    assert old["memory"]["basis"] == "file_and_kv_cache"
    assert (await api.get(f"/v1/artifacts/{old['id']}")).body["memory_estimate"] is None

    page = await _page(api, f"/artifacts/{smollm2}?context=8K&cache_type=q8_0&batch=256")
    assert page.find("option", value="q8_0", selected=None)
    assert page.find("input", id="batch", value="256")
    assert page.find("svg", **{"class": "memory-parts"})
    html = (await api.get(f"/artifacts/{smollm2}?context=8K&cache_type=q8_0&batch=256")).body
    assert "Part by part" in html and "KV cache" in html
    blank = await api.get(f"/artifacts/{smollm2}?context=&batch=&cache_type=")  # the form's empty fields
    assert blank.status == 200
    assert "the next crawl or index sizes it as llama.cpp does" in (await api.get(f"/artifacts/{old['id']}")).body


async def test_the_quant_table_says_whether_llama_cpp_loads_each_file(api: ApiClient, real: str) -> None:  # noqa: F811
    rows = {a["path"]: a for a in (await api.get(f"/v1/repos/{real}")).body["artifacts"]}
    smollm2, gemma3, copy = (rows[p] for p in sorted(rows, key=lambda p: (p.startswith("copy"), p)))
    assert smollm2["runs_in_llama_cpp"] is True and smollm2["llama_cpp_finding_counts"] == {
        "error": 0, "warning": 1, "info": 0}
    assert gemma3["runs_in_llama_cpp"] is True and gemma3["llama_cpp_finding_counts"]["warning"] == 0
    assert copy["runs_in_llama_cpp"] is None
    page = await _page(api, f"/repos/{real}?memory_context=&max_memory=")
    assert len([a for a in page.find("a") if str(a.get("href", "")).endswith("#compat-h")]) == 2
    html = (await api.get(f"/repos/{real}")).body
    assert "loads</a>, 1 warning" in html and "not checked" in html
