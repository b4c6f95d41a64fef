"""Repo pages, lineage walks and the single-artifact page."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from registry.catalog import lineage
from registry.catalog.db import Database
from registry.catalog.search.memory import BASIS_BEFORE as OLD
from registry.catalog.snapshot import LineageRecord
from tests.api.conftest import ApiClient
from tests.api.data import TEMPLATE
from tests.catalog.factories import make_snapshot

pytestmark = pytest.mark.usefixtures("catalog")


async def _artifact_id(api: ApiClient, query: str) -> int:
    reply = await api.get(f"/v1/artifacts?{query}")
    return int(reply.body["items"][0]["id"])


async def test_repo_page_has_card_artifacts_and_direct_edges(api: ApiClient) -> None:
    reply = await api.get("/v1/repos/bartowski/Llama-3-8B-GGUF")
    assert reply.status == 200 and reply.body["moved_from"] == []
    repo = reply.body["repo"]
    assert repo["card_base_model"] == ["meta-llama/Llama-3-8B"]
    assert repo["card_base_model_relation"] == "quantized"
    paths = [a["path"] for a in reply.body["artifacts"]]
    assert paths == sorted(paths) and "broken.gguf" in paths
    q4 = next(a for a in reply.body["artifacts"] if a["path"] == "Llama-3-8B-Q4_K_M.gguf")
    assert q4["facts"]["file_type"] == "Q4_K_M" and q4["latest_verification"] is None
    assert q4["shards"][0]["sha256"] == "ab" * 32
    assert "metadata" not in q4  # the repo page stays small
    broken = next(a for a in reply.body["artifacts"] if a["path"] == "broken.gguf")
    assert broken["facts"] is None and broken["error"]["code"] == "bad_magic"
    parents = reply.body["lineage"]["parents"]
    assert {(e["parent"], e["relation"], e["source"]) for e in parents} >= {
        ("meta-llama/Llama-3-8B", "quantized", "card"),
        ("meta-llama/Llama-3-8B", "unknown", "gguf"),
    }
    assert [e["child"] for e in reply.body["lineage"]["children"]] == ["someone/llama-3-8b-finetune-GGUF"]


async def test_unknown_repo_is_404(api: ApiClient) -> None:
    reply = await api.get("/v1/repos/nobody/nothing")
    assert reply.status == 404
    assert reply.body["error"]["details"] == {"repo": "nobody/nothing"}


async def test_a_repo_is_found_by_its_id_in_any_case(api: ApiClient) -> None:
    """As on the hub: the page and the tree of bartowski/Llama-3-8B-GGUF, spelled as the
    catalog spells it, whatever case the path uses."""
    exact = await api.get("/v1/repos/bartowski/Llama-3-8B-GGUF")
    other = await api.get("/v1/repos/Bartowski/llama-3-8b-gguf")
    assert other.status == 200 and other.body == exact.body
    tree = await api.get("/v1/repos/META-LLAMA/llama-3-8b/lineage?direction=descendants")
    assert tree.status == 200 and tree.body["repo"] == "meta-llama/Llama-3-8B" and tree.body["in_catalog"]
    assert {e["child"] for e in tree.body["descendants"]} == {"bartowski/Llama-3-8B-GGUF",
                                                             "someone/llama-3-8b-finetune-GGUF"}  # fmt: skip
    assert (await api.get("/v1/artifacts?descendant_of=META-LLAMA/LLAMA-3-8B")).body["items"]


async def test_overlong_repo_name_is_400(api: ApiClient) -> None:
    reply = await api.get("/v1/repos/org/" + "n" * 151)
    assert reply.status == 400
    assert reply.body["error"]["details"]["parameter"] == "name"


@pytest.mark.parametrize(
    ("path", "parameter"),
    [("/v1/repos/org%00/name", "org"), ("/v1/repos/org/na%00me/lineage", "name")],
)
async def test_nul_in_a_repo_path_is_400_on_every_database(api: ApiClient, path: str, parameter: str) -> None:
    # PostgreSQL refuses NUL in a text parameter: it must not reach the query.
    reply = await api.get(path)
    assert reply.status == 400, reply.body
    assert reply.body["error"]["details"]["parameter"] == parameter


async def test_lineage_both_directions_and_depth(api: ApiClient) -> None:
    reply = await api.get("/v1/repos/bartowski/Llama-3-8B-GGUF/lineage")
    assert reply.status == 200
    assert reply.body["direction"] == "both" and reply.body["depth"] == 3 and reply.body["in_catalog"]
    assert reply.body["truncated"] is False and reply.body["max_edges"] == lineage.MAX_EDGES
    assert {e["parent"] for e in reply.body["ancestors"]} == {"meta-llama/Llama-3-8B"}
    assert {e["child"] for e in reply.body["descendants"]} == {"someone/llama-3-8b-finetune-GGUF"}

    deep = await api.get("/v1/repos/meta-llama/Llama-3-8B/lineage?direction=descendants&depth=2")
    assert "ancestors" not in deep.body
    assert {(e["child"], e["depth"]) for e in deep.body["descendants"]} == {
        ("bartowski/Llama-3-8B-GGUF", 1),
        ("someone/llama-3-8b-finetune-GGUF", 2),
    }
    shallow = await api.get("/v1/repos/meta-llama/Llama-3-8B/lineage?direction=descendants&depth=1")
    assert {e["child"] for e in shallow.body["descendants"]} == {"bartowski/Llama-3-8B-GGUF"}

    up = await api.get("/v1/repos/someone/llama-3-8b-finetune-GGUF/lineage?direction=ancestors&depth=10")
    assert "descendants" not in up.body
    assert {e["parent"] for e in up.body["ancestors"]} == {"bartowski/Llama-3-8B-GGUF", "meta-llama/Llama-3-8B"}


async def test_a_dense_family_answers_at_most_max_edges_a_side(
    api: ApiClient, insert: Callable[..., Awaitable[None]]
) -> None:
    # 33 repos naming each other as base models: 1,056 edges, all within depth 2.
    ids = [f"o/r{i:02d}" for i in range(33)]
    await insert(*(make_snapshot(r, lineage=tuple(LineageRecord(p, "merge", "card") for p in ids if p != r))
                   for r in ids))  # fmt: skip
    cut = (await api.get("/v1/repos/o/r00/lineage?depth=10")).body
    assert cut["truncated"] is True and cut["max_edges"] == lineage.MAX_EDGES
    for side in ("ancestors", "descendants"):
        assert len(cut[side]) == lineage.MAX_EDGES
        assert [e["depth"] for e in cut[side][:32]] == [1] * 32  # the nearest edges are kept
    whole = (await api.get("/v1/repos/o/r00/lineage?depth=1")).body
    assert whole["truncated"] is False and len(whole["ancestors"]) == len(whole["descendants"]) == 32


async def test_lineage_of_a_parent_outside_the_catalog(api: ApiClient) -> None:
    reply = await api.get("/v1/repos/qwen/Qwen2-0.5B/lineage?direction=descendants")
    assert reply.status == 200
    assert reply.body["in_catalog"] is False
    assert [(e["child"], e["parent_in_catalog"]) for e in reply.body["descendants"]] == [
        ("qwen/Qwen2-0.5B-GGUF", False)
    ]
    assert (await api.get("/v1/repos/nobody/nothing/lineage")).status == 404


@pytest.mark.parametrize(
    ("query", "parameter"),
    [("direction=up", "direction"), ("depth=0", "depth"), ("depth=11", "depth"), ("depth=x", "depth"), ("deep=1", "deep")],
)
async def test_lineage_bad_parameters(api: ApiClient, query: str, parameter: str) -> None:
    reply = await api.get(f"/v1/repos/meta-llama/Llama-3-8B/lineage?{query}")
    assert reply.status == 400
    assert reply.body["error"]["details"]["parameter"] == parameter


async def test_artifact_page_in_full(api: ApiClient) -> None:
    artifact_id = await _artifact_id(api, "file_type=F16")
    reply = await api.get(f"/v1/artifacts/{artifact_id}")
    assert reply.status == 200
    body = reply.body
    assert body["id"] == artifact_id and body["repo"] == "meta-llama/Llama-3-8B"
    assert body["chat_template"] == TEMPLATE
    assert body["facts"]["chat_template_sha256"] == "cd" * 32
    assert body["facts"]["context_length"] == 8192 and body["facts"]["vocab_size"] == 32000
    assert body["facts"]["kv_cache"] == {"layers": 32, "bytes_per_token": 131072, "swa_layers": 0,
                                         "swa_bytes_per_token": 0, "sliding_window": None,
                                         "at_context_length": 2**30, "recurrent_layers": 0}  # fmt: skip
    assert body["quant_mix"] == [{"tensor_type": "F16", "tensors": 200, "elements": 8 * 10**9, "bytes": 16 * 10**9}]
    assert body["metadata"]["general.name"] == "Llama 3 8B"
    tokens = body["metadata"]["tokenizer.ggml.tokens"]
    assert tokens["summary"] == "array" and tokens["length"] == 1000 and len(tokens["head"]) == 8
    assert body["metadata"]["general.description"]["length"] == 10_000


async def test_the_kv_cache_is_sized_at_the_context_asked_for(api: ApiClient) -> None:
    with_kv = await _artifact_id(api, "file_type=F16")
    reply = await api.get(f"/v1/artifacts/{with_kv}?context=1000")
    assert reply.status == 200
    assert reply.body["facts"]["kv_cache"]["at_context"] == {"tokens": 1000, "bytes": 1000 * 131072}
    # with the file, at the context asked for; else at the default 4,096 (the search hit's figure)
    size = reply.body["file_size"]
    assert reply.body["memory"] == {"tokens": 1000, "bytes": size + 1000 * 131072, "basis": OLD}
    plain = (await api.get(f"/v1/artifacts/{with_kv}")).body
    assert "at_context" not in plain["facts"]["kv_cache"]
    assert plain["memory"] == {"tokens": 4096, "bytes": size + 4096 * 131072, "basis": OLD}
    [hit] = [i for i in (await api.get("/v1/artifacts?file_type=F16")).body["items"] if i["id"] == with_kv]
    assert hit["memory"] == plain["memory"]
    without = await _artifact_id(api, "file_type=Q8_0")
    reply = await api.get(f"/v1/artifacts/{without}?context=1000")
    assert reply.status == 200 and reply.body["facts"].get("kv_cache") is None and reply.body["memory"] is None
    for bad in ("0", "-1", "8X", "1" * 14):
        reply = await api.get(f"/v1/artifacts/{with_kv}?context={bad}")
        assert reply.status == 400 and reply.body["error"]["details"]["parameter"] == "context", bad


async def test_a_context_beyond_the_models_own_sizes_both_answers_at_its_own(api: ApiClient) -> None:
    """One question, one answer: `memory` and `kv_cache.at_context` at the same tokens, each
    saying which: an 8K model asked for 32K is sized at its 8,192."""
    with_kv = await _artifact_id(api, "file_type=F16")
    for context in ("32768", "32K"):
        body = (await api.get(f"/v1/artifacts/{with_kv}?context={context}")).body
        assert body["facts"]["context_length"] == 8192
        assert body["memory"] == {"tokens": 8192, "bytes": body["file_size"] + 8192 * 131072, "basis": OLD}
        assert body["facts"]["kv_cache"]["at_context"] == {"tokens": 8192, "bytes": 8192 * 131072}


def test_the_stored_estimate_is_sized_as_the_format_core_sizes_it() -> None:
    from dataclasses import asdict

    from registry.gguf.kvcache import KVCache
    from registry.responses import Facts

    row = {c: None for c in Facts.__struct_fields__} | {"extra": {}}
    for kv in (KVCache(3, 3072, 15, 15360, 512), KVCache(30, 23040), KVCache(0, 0, 2, 1024, 64, recurrent_layers=2)):
        stored = Facts.from_row(row | {"extra": {"kv_cache": asdict(kv)}}).kv_cache
        assert stored is not None
        for tokens in (1, 64, 100, 512, 513, 32768):
            assert stored.bytes_at(tokens) == kv.bytes_at(tokens)
    # a stored estimate of another shape (an older or newer release) reads as none
    assert Facts.from_row(row | {"extra": {"kv_cache": {"bytes_per_token": "x"}}}).kv_cache is None
    assert Facts.from_row(row | {"extra": {"kv_cache": {"layers": 1, "bytes_per_token": 2,
                                                        "sliding_window": "x"}}}).kv_cache is None


async def test_artifact_quant_mix_is_largest_first_and_shards_listed(api: ApiClient) -> None:
    iq2 = await api.get(f"/v1/artifacts/{await _artifact_id(api, 'file_type=IQ2_XS')}")
    assert [q["tensor_type"] for q in iq2.body["quant_mix"]] == ["IQ2_XS", "F32"]
    mixtral = await api.get(f"/v1/artifacts/{await _artifact_id(api, 'expert_count=8')}")
    assert [s["split_no"] for s in mixtral.body["shards"]] == [0, 1]
    assert mixtral.body["shard_count"] == 2


async def test_artifact_errors(api: ApiClient) -> None:
    missing = await api.get("/v1/artifacts/987654")
    assert missing.status == 404 and missing.body["error"]["details"] == {"artifact_id": 987654}
    for bad in ("abc", "0", "-3", "99999999999999999999999", "%EF%BC%91"):  # the last: a full-width 1
        reply = await api.get(f"/v1/artifacts/{bad}")
        assert reply.status == 400, bad
        assert reply.body["error"]["details"]["parameter"] == "id"
    artifact_id = await _artifact_id(api, "file_type=F16")
    # A row written without a tensor table (tests/web/test_tensors.py has one with it).
    tensors = await api.get(f"/v1/artifacts/{artifact_id}/tensors")
    assert tensors.status == 404 and tensors.body["error"]["code"] == "not_found"
    assert (await api.get(f"/v1/artifacts/{artifact_id}?tensors=1")).status == 400  # not a parameter of the page


async def test_a_repo_id_the_hub_moved_redirects_to_the_repo(api: ApiClient, db: Database) -> None:
    """After the hub moved bartowski/Llama-3-8B-GGUF to another owner, the old id's routes
    answer 308 to the same request for the new id (as the hub does), its children show the new
    id as their parent, and `descendant_of` finds them by either id."""
    from registry.catalog.services import repo_moved

    old, new = "bartowski/Llama-3-8B-GGUF", "lmstudio/Llama-3-8B-GGUF"
    async with db.sessions() as session, session.begin():
        assert await repo_moved(session, old, new) == "renamed"
    query = "?direction=both&depth=2"
    reply = await api.get(f"/v1/repos/Bartowski/llama-3-8b-gguf/lineage{query}", allow_redirects=False)
    assert reply.status == 308
    assert reply.headers["Location"] == f"/v1/repos/{new}/lineage{query}"
    assert reply.body["error"]["code"] == "moved"
    assert reply.body["error"]["details"] == {"repo": "Bartowski/llama-3-8b-gguf", "moved_to": new}
    page = await api.get(f"/v1/repos/{old}")  # followed
    assert page.status == 200 and page.body["repo"]["repo_id"] == new and page.body["moved_from"] == [old]
    assert [e["child"] for e in page.body["lineage"]["children"]] == ["someone/llama-3-8b-finetune-GGUF"]
    child = await api.get("/v1/repos/someone/llama-3-8b-finetune-GGUF")
    assert [(e["parent"], e["parent_in_catalog"]) for e in child.body["lineage"]["parents"]] == [(new, True)]
    for name in (old, new):
        found = await api.get(f"/v1/artifacts?descendant_of={name}")
        assert {i["repo"] for i in found.body["items"]} == {"someone/llama-3-8b-finetune-GGUF"}
    assert (await api.get("/v1/repos/bartowski/Other-GGUF")).status == 404  # other ids are not moved


async def test_a_repo_moved_to_an_id_without_an_owner_is_not_redirected(api: ApiClient, db: Database) -> None:
    """The hub has legacy ids with no owner part (`gpt2`): no route of the repo's shape names
    them, so the old id is not redirected to a path that would not match."""
    from registry.catalog.services import repo_moved

    async with db.sessions() as session, session.begin():
        assert await repo_moved(session, "bartowski/Llama-3-8B-GGUF", "llama-3-8b-gguf") == "renamed"
    reply = await api.get("/v1/repos/bartowski/Llama-3-8B-GGUF", allow_redirects=False)
    assert reply.status == 404 and reply.body["error"]["code"] == "not_found"
