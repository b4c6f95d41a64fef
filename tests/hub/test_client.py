"""The hub client against the fake hub: real sockets, loopback."""

from __future__ import annotations

import functools
import gzip
import itertools
import json
import re
import zlib
from collections.abc import AsyncIterator

import pytest

from registry.config import HubSettings
from registry.hub import client as client_module
from registry.hub.client import MAX_STALE_PAGES, HubClient, RepoFile, RepoInfo, RepoSummary
from registry.hub.errors import (
    HubTimeout,
    InvalidResponse,
    NotAuthorized,
    RateLimited,
    RepoNotFound,
    RevisionNotFound,
    ServerError,
)
from registry.hub.http import HttpOptions, HubHttp
from tests.fakehub import Corpus, FakeHub, Fault, ModelSpec, Repo, gguf_repo, sample_corpus
from tests.fakehub import RepoFile as FakeFile
from tests.fakehub.corpus import SynthBlob
from tests.fakehub.testing import FAST_RETRY, TOKEN, Sleeps


def _many(n: int) -> Corpus:
    spec = ModelSpec()
    return Corpus(
        gguf_repo(f"{'alice' if i % 5 == 0 else 'bob'}/model-{i:03d}-GGUF", spec, downloads=i, likes=n - i)
        for i in range(n)
    )


@pytest.fixture
async def hub() -> AsyncIterator[FakeHub]:
    async with FakeHub(sample_corpus(), tokens={TOKEN}) as h:
        yield h


async def _ids(client: HubClient, **kw: object) -> list[str]:
    return [r.repo_id async for r in client.list_gguf_repos(**kw)]  # type: ignore[arg-type]


async def test_listing_follows_link_pagination() -> None:
    async with FakeHub(_many(250), page_size=50) as hub:
        client = HubClient(hub.endpoint)
        ids = await _ids(client)
        assert len(ids) == 250 == len(set(ids))
        pages = hub.requests_to("api")
        assert len(pages) == 5
        assert all("cursor" in p.query for p in pages[1:])
        assert not any(p.authorization for p in pages)


async def test_listing_is_incremental_and_limited() -> None:
    async with FakeHub(_many(250), page_size=20) as hub:
        client = HubClient(hub.endpoint)
        seen = 0
        async for _ in client.list_gguf_repos():
            seen += 1
            if seen == 30:
                break
        # One batch of 100 repos is 5 pages of 20; the other 8 pages are never fetched.
        assert len(hub.requests_to("api")) <= 5
        hub.requests.clear()
        ids = await _ids(client, limit=120)
        assert len(ids) == 120
        [page] = hub.requests_to("api")  # the limit is also the page size
        assert page.query["limit"] == "120"


async def test_limit_counts_distinct_repos_when_pages_overlap() -> None:
    """Pages that repeat a repo (an offset cursor over a listing that changed) must not use
    up the limit: `limit` repos, each once, and no page more than needed."""
    async with FakeHub(_many(10), max_page=3, faults=[Fault("overlap", route="api", times=None)]) as hub:
        client = HubClient(hub.endpoint)
        everything = await _ids(client)
        assert len(everything) == len(set(everything)) == 10
        hub.requests.clear()
        ids = await _ids(client, limit=5)
        assert ids == everything[:5]
        assert len(hub.requests_to("api")) == 2  # [0, 1, 2] then [2, 3, 4]


async def test_listing_filters_and_sort() -> None:
    async with FakeHub(_many(250), page_size=40) as hub:
        client = HubClient(hub.endpoint)
        alice = await _ids(client, author="alice")
        assert len(alice) == 50 and all(i.startswith("alice/") for i in alice)
        found = await _ids(client, search="MODEL-24")
        assert sorted(found) == sorted(
            f"{'alice' if i % 5 == 0 else 'bob'}/model-{i:03d}-GGUF" for i in range(240, 250)
        )
        top = [r async for r in client.list_gguf_repos(sort="downloads", limit=3)]
        assert [r.downloads for r in top] == [249, 248, 247]
        assert top[0].sha and top[0].last_modified is not None and "gguf" in top[0].tags
        assert hub.requests_to("api")[-1].query["filter"] == "gguf"


async def _listed_until_refused(client: HubClient, most: int = 30) -> tuple[list[str], InvalidResponse]:
    """The repo ids a listing gives (at most `most` + 1) before it raises InvalidResponse."""
    ids: list[str] = []
    with pytest.raises(InvalidResponse) as info:
        async for summary in client.list_gguf_repos():
            ids.append(summary.repo_id)
            if len(ids) > most:
                break
    return ids, info.value


async def test_listing_link_back_to_a_read_page_is_an_error_not_a_loop() -> None:
    async with FakeHub(_many(30), page_size=10) as hub:
        hub.faults.add(Fault("next_link", route="api", skip=1, times=None))  # page 2 links to itself
        ids, error = await _listed_until_refused(HubClient(hub.endpoint))
        assert "already" in error.message
        assert len(ids) == 20 == len(set(ids))  # pages 1 and 2, each once
        assert len(hub.requests_to("api")) == 2


async def test_listing_of_new_urls_with_nothing_new_is_an_error_not_endless() -> None:
    # Page 2, then the same repos again ten times, each under a new URL (then page 3: a
    # listing that never gives up pages through all of it rather than for ever).
    async with FakeHub(_many(30), page_size=10) as hub:
        hub.faults.add(Fault("repeat", route="api", skip=1, times=10))
        ids, error = await _listed_until_refused(HubClient(hub.endpoint))
        assert "without a repo it had not given" in error.message
        assert len(ids) == 20 == len(set(ids))  # pages 1 and 2; page 2 came back three more times
        assert len(hub.requests_to("api")) == 2 + MAX_STALE_PAGES


async def test_listing_next_link_to_another_host_gets_no_token() -> None:
    async with FakeHub(_many(5)) as other, FakeHub(_many(3), tokens={TOKEN}) as hub:
        hub.faults.add(Fault("next_link", route="api", link=f"{other.endpoint}/api/models?filter=gguf"))
        ids = await _ids(HubClient(hub.endpoint, TOKEN))
        assert len(ids) == 5  # both pages read; the other hub's first three names repeat this one's
        [mine] = hub.requests_to("api")
        [theirs] = other.requests_to("api")
        assert mine.authorization
        assert not theirs.authorization


async def test_stalled_listing_times_out() -> None:
    async with FakeHub(_many(3)) as hub:
        hub.faults.add(Fault("latency", route="api", delay=2.0, times=None))
        sleeps = Sleeps()
        client = HubClient(hub.endpoint, retry=FAST_RETRY, sleep=sleeps, timeout=0.1)
        with pytest.raises(HubTimeout):
            await _ids(client)
        assert len(sleeps) == FAST_RETRY.max_attempts - 1


@pytest.mark.parametrize(
    "body",
    [
        b"<html>busy</html>",
        b'{"error": "not a list"}',
        b"[5]",
        b'[{"modelId": "a/b"}]',
        b'[{"id": null}]',
        b'[{"id": ["a/b"]}]',
        b"\xff\xfe[]",
    ],
)
async def test_malformed_listing_page_is_invalid_response(body: bytes) -> None:
    async with FakeHub(_many(3)) as hub:
        hub.faults.add(Fault("body", route="api", body=body))
        with pytest.raises(InvalidResponse) as info:
            await _ids(HubClient(hub.endpoint))
        assert info.value.url and info.value.url.startswith(hub.endpoint)


async def test_listing_tolerates_odd_field_types() -> None:
    entry = {"id": "a/b-GGUF", "sha": 5, "lastModified": "yesterday", "downloads": "12", "likes": None,
             "tags": "gguf", "gated": "manual", "private": "no"}  # fmt: skip
    async with FakeHub(_many(3)) as hub:
        hub.faults.add(Fault("body", route="api", body=json.dumps([entry]).encode()))
        [summary] = [s async for s in HubClient(hub.endpoint).list_gguf_repos()]
    assert summary == RepoSummary("a/b-GGUF", sha=None, tags=("gguf",), gated=True)


async def test_oversized_listing_page_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_module, "MAX_PAGE_BYTES", 4096)
    async with FakeHub(_many(3)) as hub:
        hub.faults.add(Fault("body", route="api", body=b"[" + b" " * 10_000 + b"]"))
        with pytest.raises(InvalidResponse) as info:
            await _ids(HubClient(hub.endpoint))
        assert "4096" in info.value.message


async def test_deeply_nested_listing_page_is_invalid_response() -> None:
    async with FakeHub(_many(3)) as hub:
        hub.faults.add(Fault("body", route="api", body=b"[" * 100_000 + b"]" * 100_000))
        with pytest.raises(InvalidResponse) as info:  # not the parser's RecursionError
            await _ids(HubClient(hub.endpoint))
    assert info.value.url and info.value.url.startswith(hub.endpoint)


@functools.cache
def _gzip_bomb(head: bytes, tail: bytes, size: int = 100 << 20) -> bytes:
    """`head`, `size` spaces and `tail` (valid JSON when read whole), gzipped to about 100 KiB."""
    z = zlib.compressobj(9, wbits=zlib.MAX_WBITS | 16)
    spaces = b" " * (1 << 20)
    parts = [z.compress(head), *(z.compress(spaces) for _ in range(size >> 20)), z.compress(tail), z.flush()]
    return b"".join(parts)


_BOMBS = {"listing": (b"[", b"]"), "info": (b'{"id": "a/b", "sha": "ab", "x": "', b'"}')}


def test_a_gzip_bomb_is_decoded_in_bounded_steps_as_they_are_taken() -> None:
    bomb = _gzip_bomb(*_BOMBS["listing"])
    assert len(bomb) < 200 << 10
    pieces = client_module.decoded([bomb], "gzip", step=1 << 16)  # one received chunk: all of it
    taken = list(itertools.islice(pieces, 20))
    assert [len(p) for p in taken] == [1 << 16] * 20
    assert b"".join(taken) == b"[" + b" " * ((20 << 16) - 1)


@pytest.mark.parametrize("what", ["listing", "info"])
async def test_gzip_bomb_is_refused_once_its_decoded_bytes_pass_the_cap(hub: FakeHub, what: str) -> None:
    bomb = _gzip_bomb(*_BOMBS[what])
    hub.faults.add(Fault("body", route="api", body=bomb, encoding="gzip"))
    client = HubClient(hub.endpoint, retry=FAST_RETRY, sleep=Sleeps())
    with pytest.raises(InvalidResponse) as info:
        await (_ids(client) if what == "listing" else client.repo_info("a/b"))
    cap = client_module.MAX_PAGE_BYTES if what == "listing" else client_module.MAX_INFO_BYTES
    assert len(bomb) < cap < 100 << 20
    said = re.search(r"over (\d+) bytes \(refused after decoding (\d+)\)", info.value.message)
    assert said is not None, info.value.message
    # Decoding stopped one bounded step past the cap, not at whatever one received chunk held.
    assert int(said[1]) == cap < int(said[2]) <= cap + client_module.DECODE_STEP
    assert len(hub.requests_to("api")) == 1  # not retried


_PACK = {"gzip": gzip.compress, "deflate": zlib.compress}


@pytest.mark.parametrize("coding", client_module.ACCEPT_ENCODING.split(", "))
async def test_every_encoding_asked_for_is_decoded(hub: FakeHub, coding: str) -> None:
    page = json.dumps([{"id": "a/b-GGUF"}]).encode()
    info = json.dumps({"id": "a/b-GGUF", "sha": "ab", "siblings": [{"rfilename": "m.gguf"}]}).encode()
    hub.faults.add(Fault("body", route="api", repo="", body=_PACK[coding](page), encoding=coding))
    hub.faults.add(Fault("body", route="api", repo="a/b-GGUF", body=_PACK[coding](info), encoding=coding))
    client = HubClient(hub.endpoint)
    assert await _ids(client) == ["a/b-GGUF"]
    assert (await client.repo_info("a/b-GGUF")).files == (RepoFile("m.gguf"),)
    sent = hub.requests_to("api")
    assert [r.faults for r in sent] == [["body"], ["body"]]
    assert {r.headers["Accept-Encoding"] for r in sent} == {client_module.ACCEPT_ENCODING}


@pytest.mark.parametrize(
    ("body", "coding"),
    [
        (b"[]", "br"),  # not one we asked for: it cannot be decoded
        (b"[]", "gzip, gzip"),
        (gzip.compress(b"[]"), "gzip, gzip"),
        (gzip.compress(b"[" * 64 + b"]" * 64)[:-12], "gzip"),  # cut short
        (b"[] is not gzip", "gzip"),
    ],
)
async def test_undecodable_body_is_invalid_response(hub: FakeHub, body: bytes, coding: str) -> None:
    hub.faults.add(Fault("body", route="api", body=body, encoding=coding, times=None))
    client = HubClient(hub.endpoint, retry=FAST_RETRY, sleep=Sleeps())
    with pytest.raises(InvalidResponse):
        await _ids(client)
    with pytest.raises(InvalidResponse):
        await client.repo_info("a/b")


async def test_repo_info_round_trip(hub: FakeHub) -> None:
    client = HubClient(hub.endpoint)
    info = await client.repo_info("synth/tiny-llama-GGUF")
    repo = hub.corpus.repos["synth/tiny-llama-GGUF"]
    assert isinstance(info, RepoInfo)
    assert info.sha == repo.sha
    assert info.license == "llama3.1"
    assert info.base_model == ("synth/tiny-llama",)
    assert info.base_model_relation == "quantized"
    assert "base_model:quantized:synth/tiny-llama" in info.tags
    assert info.last_modified is not None and info.last_modified.year == 2025
    assert {f.path for f in info.gguf_files} == {f.path for f in repo.files if f.path.endswith(".gguf")}
    for f in info.gguf_files:
        blob = repo.file(f.path).blob  # type: ignore[union-attr]
        assert (f.size, f.sha256) == (blob.size, blob.sha256)
    readme = next(f for f in info.files if f.path == "README.md")
    assert readme.sha256 is None and readme.size  # kept in git, not LFS
    pinned = await client.repo_info("synth/tiny-llama-GGUF", revision=repo.sha)
    assert pinned == info
    assert hub.requests_to("api")[-1].path.endswith(f"/revision/{repo.sha}")


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[1]",
        b'{"sha": "ab"}',
        b'{"id": 5, "sha": "ab"}',
        b'{"id": "a/b", "sha": "ab", "lastModified": "yesterday"}',
        b'{"id": "a/b", "sha": "ab", "siblings": [5]}',
        b'{"id": "a/b", "sha": "ab", "siblings": {"a": 1}}',
        b'{"id": "a/b", "sha": "ab", "siblings": [{"rfilename": null}]}',
        b'{"id": "a/b", "sha": "ab", "siblings": [{"rfilename": "x.gguf", "lfs": {"sha256": "c"}}]}',
    ],
)
async def test_malformed_repo_info_is_invalid_response(hub: FakeHub, body: bytes) -> None:
    hub.faults.add(Fault("body", route="api", body=body, times=None))
    with pytest.raises(InvalidResponse) as info:
        await HubClient(hub.endpoint, retry=FAST_RETRY, sleep=Sleeps()).repo_info("synth/tiny-llama-GGUF")
    assert info.value.url == f"{hub.endpoint}/api/models/synth/tiny-llama-GGUF"
    assert len(hub.requests_to("api")) == 1  # a malformed answer is not retried


async def test_repo_info_tolerates_odd_field_types(hub: FakeHub) -> None:
    body = {"id": "a/b-GGUF", "sha": 5, "downloads": "12", "tags": "gguf", "cardData": [1],
            "siblings": [{"rfilename": "m.gguf", "size": "12", "lfs": {"sha256": 5, "size": 9, "pointerSize": 1}}]}  # fmt: skip
    hub.faults.add(Fault("body", route="api", body=json.dumps(body).encode()))
    info = await HubClient(hub.endpoint).repo_info("a/b-GGUF")
    assert info == RepoInfo("a/b-GGUF", sha=None, tags=("gguf",), files=(RepoFile("m.gguf"),))


async def test_oversized_repo_info_is_refused_unread(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_module, "MAX_INFO_BYTES", 1 << 20)
    size = 64 << 20
    hub.faults.add(Fault("big_body", route="api", size=size, times=None))  # valid JSON, if read whole
    with pytest.raises(InvalidResponse) as info:
        await HubClient(hub.endpoint, retry=FAST_RETRY, sleep=Sleeps()).repo_info("synth/tiny-llama-GGUF")
    assert str(1 << 20) in info.value.message
    assert info.value.url == f"{hub.endpoint}/api/models/synth/tiny-llama-GGUF"
    [sent] = hub.requests_to("api")  # not retried
    assert sent.bytes_sent < size  # the reader hung up: the rest was never sent


async def test_deeply_nested_repo_info_is_invalid_response(hub: FakeHub) -> None:
    hub.faults.add(
        Fault("body", route="api", body=b'{"id": "a/b", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    )
    with pytest.raises(InvalidResponse):  # not the parser's RecursionError
        await HubClient(hub.endpoint).repo_info("a/b")


async def test_gated_and_list_base_model(hub: FakeHub) -> None:
    client = HubClient(hub.endpoint)
    vision = await client.repo_info("other/vision-GGUF")
    assert vision.gated and vision.gated_mode == "manual"
    assert vision.base_model_relation == "finetune"
    moe = await client.repo_info("synth/split-moe-GGUF")
    assert moe.base_model == ("synth/moe-base",)
    assert len(moe.gguf_files) == 3


async def test_errors_are_typed(hub: FakeHub) -> None:
    client = HubClient(hub.endpoint)
    with pytest.raises(RepoNotFound) as info:
        await client.repo_info("nobody/nothing")
    assert info.value.request_id and info.value.request_id.startswith("fake-")
    with pytest.raises(RevisionNotFound):
        await client.repo_info("synth/tiny-llama-GGUF", revision="0" * 40)


async def test_repo_info_errors_keep_the_hubs_words() -> None:
    corpus = sample_corpus()
    corpus.add(Repo("a/secret-GGUF", [FakeFile("s.gguf", SynthBlob(ModelSpec()))], private=True))
    async with FakeHub(corpus, tokens={TOKEN}) as hub:
        with pytest.raises(RepoNotFound) as missing:
            await HubClient(hub.endpoint, TOKEN).repo_info("nobody/nothing")
        with pytest.raises(RepoNotFound) as private:  # 401 with X-Error-Code RepoNotFound
            await HubClient(hub.endpoint).repo_info("a/secret-GGUF")
        with pytest.raises(NotAuthorized) as bad_token:  # 401 without a code
            await HubClient(hub.endpoint, "hf_wrong").repo_info("synth/tiny-llama-GGUF")
    assert (missing.value.status, missing.value.message) == (404, "Repository not found")
    assert (private.value.status, private.value.message) == (401, "Repository not found")
    assert bad_token.value.status == 401
    assert bad_token.value.message == "Invalid credentials in Authorization header"
    for err in (missing.value, private.value, bad_token.value):
        assert err.request_id and err.request_id.startswith("fake-")
        assert err.url and err.url.startswith(f"{hub.endpoint}/api/models/")


async def test_repo_info_retries_5xx(hub: FakeHub) -> None:
    sleeps = Sleeps()
    client = HubClient(hub.endpoint, retry=FAST_RETRY, sleep=sleeps)
    hub.faults.add(Fault("status", route="api", status=503, times=2))
    info = await client.repo_info("synth/tiny-llama-GGUF")
    assert info.repo_id == "synth/tiny-llama-GGUF"
    assert len(sleeps) == 2
    hub.faults.add(Fault("status", route="api", status=500, times=None))
    with pytest.raises(ServerError):
        await client.repo_info("synth/tiny-llama-GGUF")


async def test_malformed_retry_after_is_a_typed_rate_limit(hub: FakeHub) -> None:
    sleeps = Sleeps()
    client = HubClient(hub.endpoint, retry=FAST_RETRY, sleep=sleeps)
    hub.faults.add(Fault("status", route="api", status=429, retry_after="soon", times=None))
    with pytest.raises(RateLimited) as info:
        await client.repo_info("synth/tiny-llama-GGUF")
    assert info.value.retry_after is None
    assert len(sleeps) == FAST_RETRY.max_attempts - 1


async def test_token_sent_only_when_configured(hub: FakeHub) -> None:
    await HubClient(hub.endpoint).repo_info("synth/tiny-llama-GGUF")
    await HubClient(hub.endpoint, TOKEN).repo_info("synth/tiny-llama-GGUF")
    anon, authed = hub.requests_to("api")
    assert not anon.authorization
    assert authed.headers["Authorization"] == f"Bearer {TOKEN}"


async def test_resolve_url_feeds_the_reader(hub: FakeHub) -> None:
    settings = HubSettings(endpoint=hub.endpoint, token=TOKEN)
    client = HubClient.from_settings(settings)
    info = await client.repo_info("synth/split-moe-GGUF")
    async with HubHttp(HttpOptions.from_settings(settings)) as http:
        for f in info.gguf_files:
            remote = await http.fetch_header(
                client.resolve_url(info.repo_id, info.sha, f.path), first_window=settings.shard_window
            )
            assert remote.file_size == f.size
            assert remote.etag == f'"{f.sha256}"'
    assert all(f"/resolve/{info.sha}/" in r.path for r in hub.requests_to("resolve"))


async def test_environment_token_is_never_used(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_from_the_environment")
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", "hf_from_the_environment")
    client = HubClient(hub.endpoint)
    await client.repo_info("synth/tiny-llama-GGUF")
    [_ async for _ in client.list_gguf_repos(limit=2)]
    assert hub.requests and not any(r.authorization for r in hub.requests)
