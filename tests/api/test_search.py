"""GET /v1/artifacts and /v1/facets over a real catalog written by the catalog's writer."""

from __future__ import annotations

import base64
import json
from collections.abc import Awaitable, Callable

import pytest

from registry.catalog.search.memory import BASIS_BEFORE as OLD
from registry.gguf.kvcache import KVCache
from tests.api.conftest import ApiClient, MakeApi, settings_with
from tests.api.data import INDEXED_ARTIFACTS
from tests.catalog.factories import artifact, make_facts, make_snapshot

pytestmark = pytest.mark.usefixtures("catalog")


async def _ids(api: ApiClient, query: str) -> list[str]:
    reply = await api.get(f"/v1/artifacts?{query}")
    assert reply.status == 200, reply.body
    return [f"{i['repo']}/{i['path']}" for i in reply.body["items"]]


async def test_default_search_lists_indexed_artifacts_by_downloads(api: ApiClient) -> None:
    reply = await api.get("/v1/artifacts")
    assert reply.status == 200
    items = reply.body["items"]
    assert len(items) == INDEXED_ARTIFACTS
    assert [i["downloads"] for i in items] == sorted((i["downloads"] for i in items), reverse=True)
    assert items[0]["repo"] == "meta-llama/Llama-3-8B"
    assert items[0]["url"] == f"/v1/artifacts/{items[0]['id']}"
    assert reply.body["next"] is None and "Link" not in reply.headers
    assert reply.body["limit"] == 20


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("q=mixture", ["mistralai/Mixtral-8x7B-GGUF/mixtral-00001-of-00002.gguf"]),
        ("q=funny+tune", ["someone/llama-3-8b-finetune-GGUF/ft.gguf"]),
        ("architecture=qwen2", ["qwen/Qwen2-0.5B-GGUF/qwen2-0_5b-q8_0.gguf"]),
        ("file_type=IQ2_XS", ["bartowski/Llama-3-8B-GGUF/Llama-3-8B-IQ2_XS.gguf"]),
        ("tensor_type=IQ2_XS", ["bartowski/Llama-3-8B-GGUF/Llama-3-8B-IQ2_XS.gguf"]),
        ("expert_count=8", ["mistralai/Mixtral-8x7B-GGUF/mixtral-00001-of-00002.gguf"]),
        ("min_params=40000000000", ["mistralai/Mixtral-8x7B-GGUF/mixtral-00001-of-00002.gguf"]),
        ("max_params=600000000", ["qwen/Qwen2-0.5B-GGUF/qwen2-0_5b-q8_0.gguf"]),
        ("size_label=8x7B", ["mistralai/Mixtral-8x7B-GGUF/mixtral-00001-of-00002.gguf"]),
        ("min_context=32768&architecture=llama", ["mistralai/Mixtral-8x7B-GGUF/mixtral-00001-of-00002.gguf"]),
        ("license=mit", ["someone/llama-3-8b-finetune-GGUF/ft.gguf"]),
        # Architecture, license, file type and size label in any ASCII case.
        ("architecture=QWEN2", ["qwen/Qwen2-0.5B-GGUF/qwen2-0_5b-q8_0.gguf"]),
        ("file_type=iq2_xs", ["bartowski/Llama-3-8B-GGUF/Llama-3-8B-IQ2_XS.gguf"]),
        ("size_label=8X7b", ["mistralai/Mixtral-8x7B-GGUF/mixtral-00001-of-00002.gguf"]),
        ("license=MIT", ["someone/llama-3-8b-finetune-GGUF/ft.gguf"]),
        ("architecture=Qwen2&file_type=Q8_0&size_label=0.5b&license=APACHE-2.0",
         ["qwen/Qwen2-0.5B-GGUF/qwen2-0_5b-q8_0.gguf"]),
        ("status=error", ["bartowski/Llama-3-8B-GGUF/broken.gguf"]),
        ("descendant_of=bartowski/Llama-3-8B-GGUF", ["someone/llama-3-8b-finetune-GGUF/ft.gguf"]),
        ("verification=passed", []),
        ("min_params=10&max_params=5", []),
        ("min_size=16001", ["mistralai/Mixtral-8x7B-GGUF/mixtral-00001-of-00002.gguf"]),  # 2 shards of 13,000
        ("max_size=2500&descendant_of=meta-llama/llama-3-8b",
         ["bartowski/Llama-3-8B-GGUF/Llama-3-8B-IQ2_XS.gguf", "someone/llama-3-8b-finetune-GGUF/ft.gguf"]),
        ("min_size=10&max_size=5", []),
        # Amounts as people write them (catalog.amounts), the same as `registry search` takes.
        ("min_params=40B", ["mistralai/Mixtral-8x7B-GGUF/mixtral-00001-of-00002.gguf"]),
        ("max_params=0.6b", ["qwen/Qwen2-0.5B-GGUF/qwen2-0_5b-q8_0.gguf"]),
        ("max_params=6e8", ["qwen/Qwen2-0.5B-GGUF/qwen2-0_5b-q8_0.gguf"]),
        ("min_size=16.001KB", ["mistralai/Mixtral-8x7B-GGUF/mixtral-00001-of-00002.gguf"]),
        ("min_size=15.63kib", ["mistralai/Mixtral-8x7B-GGUF/mixtral-00001-of-00002.gguf"]),  # 16,005 bytes
        ("max_size=2.5K&descendant_of=meta-llama/llama-3-8b",
         ["bartowski/Llama-3-8B-GGUF/Llama-3-8B-IQ2_XS.gguf", "someone/llama-3-8b-finetune-GGUF/ft.gguf"]),
        ("min_params=1e30", []),  # beyond any bigint: counts as 2**63 - 1, which nothing reaches
    ],
)
async def test_each_filter(api: ApiClient, query: str, expected: list[str]) -> None:
    assert await _ids(api, query) == expected


async def test_descendants_reach_through_the_chain(api: ApiClient) -> None:
    found = await _ids(api, "descendant_of=meta-llama/Llama-3-8B&sort=name")
    assert {f.split("/")[0] for f in found} == {"bartowski", "someone"}


async def test_error_artifacts_carry_their_reason(api: ApiClient) -> None:
    reply = await api.get("/v1/artifacts?status=error")
    assert reply.body["items"][0]["error"] == {"code": "bad_magic", "message": "not a GGUF file"}


async def test_sorts(api: ApiClient) -> None:
    by_name = await _ids(api, "sort=name")
    assert by_name == sorted(by_name, key=str.lower)
    assert await _ids(api, "sort=name:desc") == by_name[::-1]
    params = await api.get("/v1/artifacts?sort=params:asc")
    counts = [i["parameter_count"] for i in params.body["items"]]
    assert counts == sorted(counts)


async def test_keyset_pages_walk_everything_once_with_link_headers(api: ApiClient) -> None:
    seen: list[int] = []
    url: str | None = "/v1/artifacts?limit=2&sort=file_size"
    pages = 0
    while url is not None:
        reply = await api.get(url)
        assert reply.status == 200
        seen += [i["id"] for i in reply.body["items"]]
        pages += 1
        link = reply.headers.get("Link")
        if reply.body["next"] is None:
            assert link is None
            url = None
        else:
            assert link is not None and link.endswith('>; rel="next"')
            url = link[1 : link.index(">")]
            assert "limit=2" in url and "sort=file_size" in url
    assert pages == 4
    assert len(seen) == len(set(seen)) == INDEXED_ARTIFACTS


@pytest.mark.parametrize(
    ("query", "parameter", "code"),
    [
        ("limit=101", "limit", "invalid_parameter"),
        ("limit=0", "limit", "invalid_parameter"),
        ("limit=ten", "limit", "invalid_parameter"),
        ("limit=1&limit=2", "limit", "invalid_parameter"),
        ("min_params=-1", "min_params", "invalid_parameter"),
        ("max_size=8XB", "max_size", "invalid_parameter"),
        ("max_size=-1GB", "max_size", "invalid_parameter"),
        ("min_params=7+B", "min_params", "invalid_parameter"),  # "7 B": no spaces
        ("min_params=1_000", "min_params", "invalid_parameter"),
        ("min_params=nan", "min_params", "invalid_parameter"),
        ("sort=popularity", "sort", "invalid_parameter"),
        ("status=deleted", "status", "invalid_parameter"),
        ("verification=great", "verification", "invalid_parameter"),
        ("q=", "q", "invalid_parameter"),
        ("q=%20", "q", "invalid_parameter"),
        ("q=%00", "q", "invalid_parameter"),  # the catalog drops NUL: it would have matched everything
        ("q=%00%20%00", "q", "invalid_parameter"),
        ("architecture=%00", "architecture", "invalid_parameter"),
        ("q=" + "x" * 201, "q", "invalid_parameter"),
        ("cursor=%%%not-base64", "cursor", "invalid_cursor"),
        ("page=2", "page", "unknown_parameter"),
        ("max_memory=8XB", "max_memory", "invalid_parameter"),
        ("max_memory=8GB&memory_context=0", "memory_context", "invalid_parameter"),
        ("max_memory=8GB&memory_context=8X", "memory_context", "invalid_parameter"),
        ("max_memory=8GB&memory_context=1.5K", "memory_context", "invalid_parameter"),
        ("max_memory=8GB&memory_context=10995116277770", "memory_context", "invalid_parameter"),  # 14 digits
    ],
)
async def test_bad_parameters_are_400_naming_them(api: ApiClient, query: str, parameter: str, code: str) -> None:
    reply = await api.get(f"/v1/artifacts?{query}")
    assert reply.status == 400, reply.body
    assert reply.body["error"]["code"] == code
    assert reply.body["error"]["details"]["parameter"] == parameter


async def test_a_context_reads_as_the_command_line_reads_it(api: ApiClient) -> None:
    """`memory_context=32K` is 32,768 tokens, as `registry search --memory-context 32K` reads it."""
    short = await api.get("/v1/artifacts?max_memory=8GiB&memory_context=32K&sort=name")
    long = await api.get("/v1/artifacts?max_memory=8GiB&memory_context=32768&sort=name")
    assert short.status == long.status == 200, short.body
    assert short.body == long.body and short.body["items"]
    assert {hit["memory"]["tokens"] for hit in short.body["items"]} <= {32768, 8192}  # or the model's own, shorter
    assert (await api.get("/v1/artifacts?memory_context=1m")).body == (
        await api.get("/v1/artifacts?memory_context=1048576")
    ).body


async def test_an_unknown_sort_lists_the_keys(api: ApiClient) -> None:
    reply = await api.get("/v1/artifacts?sort=bogus")
    assert reply.status == 400
    message = reply.body["error"]["message"]
    assert "parameter_count (or params)" in message and "memory" in message and ":desc" in message
    assert "parameter_count:asc" in reply.body["error"]["details"]["allowed"]


async def test_draft_for_lists_smaller_models_with_the_same_vocabulary(
    api: ApiClient, insert: Callable[..., Awaitable[None]]
) -> None:
    """A 7B target with 32,000 tokens; drafts need its key, at most 128 tokens more or fewer
    and fewer parameters. The shared catalog's rows have no key and never match."""
    key, other = "d" * 64, "e" * 64
    await insert(make_snapshot("draft/GGUF", artifacts=(
        artifact("target-7b.gguf", make_facts(vocab_sha256=key, vocab_size=32000, parameter_count=7 * 10**9)),
        artifact("small-1b.gguf", make_facts(vocab_sha256=key, vocab_size=32128, parameter_count=10**9)),
        artifact("tiny-100m.gguf", make_facts(vocab_sha256=key, vocab_size=31872, parameter_count=10**8)),
        artifact("padded-1b.gguf", make_facts(vocab_sha256=key, vocab_size=32129, parameter_count=10**9)),
        artifact("other-1b.gguf", make_facts(vocab_sha256=other, vocab_size=32000, parameter_count=10**9)),
        artifact("big-13b.gguf", make_facts(vocab_sha256=key, vocab_size=32000, parameter_count=13 * 10**9)),
        artifact("same-7b.gguf", make_facts(vocab_sha256=key, vocab_size=32000, parameter_count=7 * 10**9)),
    )))  # fmt: skip
    [target] = (await api.get("/v1/artifacts?q=target-7b")).body["items"]
    assert (await api.get(target["url"])).body["facts"]["vocab_sha256"] == key
    assert await _ids(api, f"draft_for={target['id']}&sort=params:asc") == [
        "draft/GGUF/tiny-100m.gguf", "draft/GGUF/small-1b.gguf",
    ]  # fmt: skip
    assert await _ids(api, f"draft_for={target['id']}&max_params=500M") == ["draft/GGUF/tiny-100m.gguf"]
    facets = (await api.get(f"/v1/facets?draft_for={target['id']}")).body
    assert facets["facets"]["architecture"] == {"llama": 2} and facets["filters"]["draft_for"] == target["id"]
    missing = await api.get("/v1/artifacts?draft_for=999999999")
    assert missing.status == 404, missing.body
    assert missing.body["error"]["code"] == "artifact_not_found"
    assert missing.body["error"]["details"] == {"parameter": "draft_for"}
    for bad in ("0", "x", "-1"):
        reply = await api.get(f"/v1/artifacts?draft_for={bad}")
        assert reply.status == 400 and reply.body["error"]["details"]["parameter"] == "draft_for"


async def test_cursor_from_another_sort_is_refused(api: ApiClient) -> None:
    first = await api.get("/v1/artifacts?limit=1&sort=likes")
    cursor = first.body["next"]
    reply = await api.get(f"/v1/artifacts?limit=1&sort=name&cursor={cursor}")
    assert reply.status == 400
    assert reply.body["error"]["details"]["parameter"] == "cursor"
    forged = base64.urlsafe_b64encode(json.dumps({"s": "likes:desc", "v": "x", "i": 1}).encode()).decode()
    reply = await api.get(f"/v1/artifacts?sort=likes&cursor={forged}")
    assert reply.status == 400
    assert reply.body["error"]["code"] == "invalid_cursor"


async def test_limit_cap_comes_from_settings(make_api: MakeApi) -> None:
    api = await make_api(settings=settings_with(max_limit=3))
    assert (await api.get("/v1/artifacts?limit=3")).status == 200
    reply = await api.get("/v1/artifacts?limit=4")
    assert reply.status == 400
    assert reply.body["error"]["details"] == {"parameter": "limit", "maximum": 3}
    assert (await api.get("/v1/artifacts")).body["limit"] == 3


async def test_facets_count_under_the_filters(api: ApiClient) -> None:
    reply = await api.get("/v1/facets")
    assert reply.status == 200
    facets = reply.body["facets"]
    assert facets["architecture"] == {"llama": 6, "qwen2": 1}
    assert facets["file_type"]["Q4_K_M"] == 3
    filtered = await api.get("/v1/facets?architecture=llama&min_context=32768")
    assert filtered.body["facets"]["architecture"] == {"llama": 1}
    assert filtered.body["filters"]["architecture"] == "llama"
    bad = await api.get("/v1/facets?sort=name")
    assert bad.status == 400 and bad.body["error"]["details"]["parameter"] == "sort"


async def test_facets_asked_for(api: ApiClient) -> None:
    """`facets` names the facets to count, in the order the answer lists them."""
    default = (await api.get("/v1/facets")).body["facets"]
    assert list(default) == ["architecture", "license", "file_type", "size_bucket"]
    reply = await api.get("/v1/facets?facets=verification,kind,architecture,kind")
    assert reply.status == 200, reply.body
    assert list(reply.body["facets"]) == ["verification", "kind", "architecture"]
    assert reply.body["facets"]["architecture"] == default["architecture"]
    assert reply.body["facets"]["kind"] == {"model": INDEXED_ARTIFACTS}
    assert reply.body["facets"]["verification"] == {"unknown": INDEXED_ARTIFACTS}
    assert "facets" not in reply.body["filters"]
    # Not probed: no capability to count under.
    assert (await api.get("/v1/facets?facets=capability")).body["facets"] == {"capability": {}}
    for bad, message in (("size", "unknown facet 'size'"), ("kind,,license", "unknown facet ''"),
                         (" ", "must not be empty"), ("x" * 129, "longer than 128")):  # fmt: skip
        reply = await api.get("/v1/facets", params={"facets": bad})
        assert reply.status == 400, bad
        error = reply.body["error"]
        assert error["details"]["parameter"] == "facets" and message in error["message"], error
    allowed = (await api.get("/v1/facets?facets=size")).body["error"]["details"]["allowed"]
    assert allowed == ["architecture", "license", "file_type", "size_bucket", "kind", "verification", "capability"]
    assert (await api.get("/v1/artifacts?facets=kind")).status == 400  # a parameter of /v1/facets only


async def test_facets_count_case_variants_together(api: ApiClient, insert: Callable[..., Awaitable[None]]) -> None:
    """A file that writes its values in other cases counts with the others; its page keeps
    the file's own spelling in `facts`."""
    await insert(make_snapshot("loud/LLAMA-GGUF", artifacts=(artifact("loud.gguf", make_facts(
        architecture="LLAMA", license="MIT", file_type="q4_k_m", size_label="8X7b", parameter_count=1)),)))  # fmt: skip
    facets = (await api.get("/v1/facets")).body["facets"]
    assert facets["architecture"] == {"llama": 7, "qwen2": 1}
    assert facets["license"]["mit"] == 2 and facets["file_type"]["Q4_K_M"] == 4
    shouted = await api.get("/v1/facets?architecture=LLAMA&license=Mit")
    assert shouted.body["facets"] == (await api.get("/v1/facets?architecture=llama&license=mit")).body["facets"]
    assert shouted.body["facets"]["license"] == {"mit": 2}
    assert shouted.body["filters"] == {"architecture": "llama", "license": "mit", "status": "indexed"}
    sized = await api.get("/v1/facets?size_label=8X7b&file_type=q4_k_m")
    assert {k: sized.body["filters"][k] for k in ("size_label", "file_type")} == {"size_label": "8x7B",
                                                                               "file_type": "Q4_K_M"}  # fmt: skip

    [hit] = (await api.get("/v1/artifacts?size_label=8x7b&license=mit")).body["items"]
    assert (hit["architecture"], hit["license"], hit["file_type"], hit["size_label"]) == ("llama", "mit", "Q4_K_M",
                                                                                         "8x7B")  # fmt: skip
    facts = (await api.get(hit["url"])).body["facts"]
    assert (facts["architecture"], facts["license"], facts["file_type"], facts["size_label"]) == (
        "LLAMA", "MIT", "q4_k_m", "8X7b")  # fmt: skip


async def test_max_memory_counts_the_kv_cache_at_the_context(
    api: ApiClient, insert: Callable[..., Awaitable[None]]
) -> None:
    """Two files of 1,000 bytes: one with 100 bytes of cache a token (context 8,192), one
    with 10 a token and 1,000 more in a 256-token window. The rows of the shared catalog
    have no estimate and never match."""
    await insert(make_snapshot("mem/GGUF", artifacts=(
        artifact("big-cache.gguf", make_facts(context_length=8192, kv_cache=KVCache(4, 100)), size=1000),
        artifact("windowed.gguf", make_facts(context_length=None, kv_cache=KVCache(
            1, 10, swa_layers=3, swa_bytes_per_token=1000, sliding_window=256)), size=1000),
    )))  # fmt: skip
    # at 4,096 tokens: 1,000 + 409,600 = 410,600 and 1,000 + 40,960 + 256,000 = 297,960
    assert await _ids(api, "max_memory=410600&sort=name:asc") == ["mem/GGUF/big-cache.gguf", "mem/GGUF/windowed.gguf"]
    assert await _ids(api, "max_memory=410599") == ["mem/GGUF/windowed.gguf"]
    assert await _ids(api, "max_memory=297959") == []
    # at 100 tokens: 11,000 and 1,000 + 1,000 + 100,000 = 102,000
    assert await _ids(api, "max_memory=11000&memory_context=100") == ["mem/GGUF/big-cache.gguf"]
    # at a million tokens: big-cache stops at its 8,192 (820,200); windowed has no limit
    assert await _ids(api, "max_memory=1MB&memory_context=1000000") == ["mem/GGUF/big-cache.gguf"]
    facets = (await api.get("/v1/facets?max_memory=1MB")).body
    assert facets["facets"]["architecture"] == {"llama": 2} and facets["filters"]["max_memory"] == 10**6
    # every hit shows its memory at the context, with or without the filter; null without an estimate
    sized = (await api.get("/v1/artifacts?memory_context=100&q=mem/gguf&sort=name:asc")).body["items"]
    assert [i["memory"] for i in sized] == [{"tokens": 100, "bytes": 11_000, "basis": OLD},
                                            {"tokens": 100, "bytes": 102_000, "basis": OLD}]  # fmt: skip
    plain = (await api.get("/v1/artifacts?q=mem/gguf&sort=name:asc")).body["items"]
    assert [i["memory"] for i in plain] == [{"tokens": 4096, "bytes": 410_600, "basis": OLD},
                                            {"tokens": 4096, "bytes": 297_960, "basis": OLD}]  # fmt: skip
    [detail] = [(await api.get(i["url"])).body for i in plain[:1]]
    assert detail["memory"] == {"tokens": 4096, "bytes": 410_600, "basis": OLD}
    others = (await api.get("/v1/artifacts?architecture=qwen2")).body["items"]
    assert others and all(i["memory"] is None for i in others)
