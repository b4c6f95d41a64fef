"""The tensor table: kept per artifact (registry/gguf/tensor_index.py), paged by
`GET /v1/artifacts/{id}/tensors` and on the artifact page, a hostile name shown as text.
Files written by gguf-py, indexed by the catalog's own indexer."""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from registry.gguf.tensor_index import TensorIndex, tensor_index
from registry.hub.local import read_header
from tests.api.conftest import ApiClient, api, catalog, insert, make_api  # noqa: F401
from tests.gguf.gguf_py import write_gguf
from tests.web.conftest import db, db_url, postgresql_url, sqlite_url, temp_databases  # noqa: F401
from tests.web.test_pages import Page, _page
from workers.index import index_paths

PAYLOAD = '<script>alert("t")</script><img src=x onerror=alert(1)>'
COUNT = 2500


@pytest.fixture
def many(tmp_path: Path) -> Path:
    tensors = [(f"blk.{i}.w", np.zeros(4, dtype=np.float32)) for i in range(COUNT - 1)]
    tensors.append((PAYLOAD, np.zeros(4, dtype=np.float32)))
    (path,) = write_gguf(tmp_path / "many.gguf", kv={"general.name": "many"}, tensors=tensors)
    return path


def test_an_index_round_trips_and_refuses_foreign_bytes(many: Path) -> None:
    index = tensor_index([read_header(many).header])
    assert index.total == len(index.rows) == COUNT
    assert index.rows[0].name == "blk.0.w" and index.rows[-1].name == PAYLOAD
    assert index.rows[0].type == "F32" and index.rows[0].shape == (4,) and index.rows[0].bytes == 16
    assert TensorIndex.decode(index.data) == index
    for bad in (b"", b"not zlib", zlib.compress(b"[2, 1, []]"), zlib.compress(b'{"a": 1}'),
                zlib.compress(b"[1, 1, [[1, 2]]]")):  # fmt: skip
        assert TensorIndex.decode(bad) is None, bad


async def test_the_tensor_table_is_paged_filtered_and_escaped(api: ApiClient, db: Any, many: Path) -> None:  # noqa: F811
    report = await index_paths(db, [many])
    assert report.errors == 0
    (hit,) = (await api.get("/v1/artifacts?q=many&sort=name")).body["items"]
    first = await api.get(f"/v1/artifacts/{hit['id']}/tensors")
    assert first.status == 200
    body = first.body
    assert body["total"] == body["stored"] == body["matched"] == COUNT
    assert [t["name"] for t in body["items"]] == [f"blk.{i}.w" for i in range(100)] and body["next_offset"] == 100
    last = (await api.get(f"/v1/artifacts/{hit['id']}/tensors?offset=2400&limit=1000")).body
    assert len(last["items"]) == 100 and last["next_offset"] is None and last["items"][-1]["name"] == PAYLOAD
    named = (await api.get(f"/v1/artifacts/{hit['id']}/tensors?name=BLK.249")).body
    assert [t["name"] for t in named["items"]] == ["blk.249.w", *(f"blk.{i}.w" for i in range(2490, 2499))]
    for bad in ("limit=0", "limit=1001", "offset=-1", "color=red"):
        assert (await api.get(f"/v1/artifacts/{hit['id']}/tensors?{bad}")).status == 400, bad
    assert (await api.get("/v1/artifacts/424242/tensors")).status == 404

    page = await _page(api, f"/artifacts/{hit['id']}?offset=2400")
    (prev,) = page.find("a", rel="prev")
    assert "offset=2300" in str(prev["href"])
    assert not page.find("a", rel="next")
    html = (await api.get(f"/artifacts/{hit['id']}?offset=2400")).body
    assert PAYLOAD not in html and "&lt;script&gt;" in html
    assert "Tensors 2401 to 2500 of 2500" in html
    assert Page((await api.get(f"/artifacts/{hit['id']}?name=blk.7&context=8K")).body).find(
        "input", type="hidden", name="context", value="8K"
    )
    twin = [a["href"] for a in page.find("a") if str(a.get("href", "")).startswith(f"/v1/artifacts/{hit['id']}")]
    assert f"/v1/artifacts/{hit['id']}" in twin  # the page's twin leaves the tensor paging out
    assert f"/v1/artifacts/{hit['id']}/tensors?offset=2400" in twin


@pytest.mark.usefixtures("catalog")
async def test_a_row_without_a_table_says_so(api: ApiClient) -> None:  # noqa: F811
    (hit,) = (await api.get("/v1/artifacts?q=llama-3-8b-f16")).body["items"]
    assert (await api.get(f"/v1/artifacts/{hit['id']}/tensors")).status == 404
    html = (await api.get(f"/artifacts/{hit['id']}")).body
    assert "keeps no tensor table for this file yet" in html
