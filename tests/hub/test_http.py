"""The remote header reader against the fake hub: real sockets, real and synthetic headers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from registry.config import HubSettings
from registry.gguf.reader import parse_header
from registry.hub.errors import (
    EncodedBody,
    EntryNotFound,
    FileChanged,
    GatedRepo,
    HeaderTooLarge,
    HubConnectionError,
    HubTimeout,
    RangeNotSatisfiable,
    RateLimited,
    ServerError,
    TruncatedBody,
)
from registry.hub.http import (
    SHARD_WINDOW,
    HttpOptions,
    HubHttp,
    RetryPolicy,
    fetch_artifact_headers,
    fetch_header,
    normalize_url,
    read_remote_artifact_headers,
    retry_hint,
    shard_urls,
)
from tests.fakehub import Corpus, FakeHub, Fault, ModelSpec, Repo, RepoFile, gguf_repo, sample_corpus
from tests.fakehub.corpus import BytesBlob
from tests.fakehub.testing import FAST_RETRY, TOKEN, Sleeps
from tests.models import GEMMA3, SMOLLM2

MiB = 1024 * 1024
SMOL = ("samples/SmolLM2-135M-Instruct-GGUF", SMOLLM2.filename)
GEMMA = ("samples/gemma-3-270m-GGUF", GEMMA3.filename)
TINY = ("synth/tiny-llama-GGUF", "tiny-llama-Q4_K_M.gguf")
BIG = ("synth/big-vocab-GGUF", "big-vocab-Q4_K_M.gguf")


def _corpus() -> Corpus:
    corpus = sample_corpus()
    corpus.add(Repo("synth/empty", [RepoFile("empty.gguf", BytesBlob(b"", lfs=True))]))
    return corpus


@pytest.fixture
async def hub() -> AsyncIterator[FakeHub]:
    async with FakeHub(_corpus(), tokens={TOKEN}) as h:
        yield h


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
async def http(hub: FakeHub, sleeps: Sleeps) -> AsyncIterator[HubHttp]:
    options = HttpOptions(endpoint=hub.endpoint, token=TOKEN, retry=FAST_RETRY)
    async with HubHttp(options, sleep=sleeps) as client:
        yield client


def _local(path: Path, n: int) -> bytes:
    with path.open("rb") as f:
        return f.read(n)


@pytest.mark.parametrize("which", ["smollm2", "gemma3"])
async def test_real_headers_in_one_or_two_requests(hub: FakeHub, http: HubHttp, which: str) -> None:
    model = SMOLLM2 if which == "smollm2" else GEMMA3
    repo_id, path = SMOL if which == "smollm2" else GEMMA
    if hub.corpus.get(repo_id) is None:
        pytest.skip(f"{model.filename} is not cached")
    remote = await http.fetch_header(hub.resolve_url(repo_id, path))
    size = model.path.stat().st_size
    local = parse_header(_local(model.path, remote.header.data_offset), file_size=size)
    assert remote.header == local
    assert remote.file_size == size
    assert 1 <= remote.requests <= 2
    # Every byte fetched is header or the one margin past it; nothing near the file size.
    assert remote.bytes_fetched <= max(2 * MiB, remote.header.data_offset + 2 * MiB)
    assert remote.final_url.startswith(hub.cdn_url)
    assert remote.etag is not None


async def test_262k_vocabulary_header_in_at_most_two_requests(hub: FakeHub, http: HubHttp) -> None:
    remote = await http.fetch_header(hub.resolve_url(*BIG))
    assert remote.header.data_offset > 2 * MiB  # does not fit the first window
    assert len(remote.header.get("tokenizer.ggml.tokens")) == 262_144
    assert remote.requests <= 2
    # Only the first request goes through the hub; the second goes straight to the CDN.
    assert len(hub.requests_to("resolve")) == 1


async def test_second_attempt_walks_on_from_where_the_first_stopped(
    hub: FakeHub, http: HubHttp, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first window ends inside the 262k-token vocabulary; the parse after the second
    read resumes the token walk there instead of walking the whole vocabulary again."""
    from registry.gguf import reader

    walks: list[tuple[int, tuple[int, int] | None]] = []
    walk = reader.walk_strings

    def recorded(buf: bytes, start: int, count: int, *args: object, **kwargs: object) -> tuple[int, int]:
        resume = kwargs.get("resume")
        walks.append((count, resume))  # type: ignore[arg-type]
        return walk(buf, start, count, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(reader, "walk_strings", recorded)
    remote = await http.fetch_header(hub.resolve_url(*BIG))
    assert remote.requests == 2
    token_walks = [resume for count, resume in walks if count == 262_144]
    assert len(token_walks) == 2
    first, second = token_walks
    assert first is None and second is not None and 0 < second[0] < 262_144
    assert len(remote.header.get("tokenizer.ggml.tokens")) == 262_144


async def test_shard_in_small_window(hub: FakeHub, http: HubHttp) -> None:
    path = "split-moe-Q8_0-00002-of-00003.gguf"
    remote = await http.fetch_header(hub.resolve_url("synth/split-moe-GGUF", path), first_window=SHARD_WINDOW)
    assert remote.requests == 1
    assert remote.bytes_fetched <= SHARD_WINDOW
    assert remote.header.get("split.no") == 1
    assert remote.header.get("split.count") == 3


async def test_token_reaches_the_hub_but_never_the_cdn(hub: FakeHub, http: HubHttp) -> None:
    await http.fetch_header(hub.resolve_url(*BIG))
    resolve, cdn = hub.requests_to("resolve"), hub.requests_to("cdn")
    assert resolve and all(r.authorization for r in resolve)
    assert cdn and not any(r.authorization for r in cdn)
    assert not any(TOKEN in value for r in cdn for value in [*r.headers.values(), *r.query.values()])


async def test_429_with_retry_after_then_success(hub: FakeHub, http: HubHttp, sleeps: Sleeps) -> None:
    hub.faults.add(Fault("status", route="cdn", status=429, retry_after="3", times=2))
    remote = await http.fetch_header(hub.resolve_url(*TINY))
    assert remote.retries == 2
    assert sleeps == [3.0, 3.0]  # the server's hint wins over our tiny backoff
    assert [r.status for r in hub.requests_to("cdn")] == [429, 429, 206]


async def test_ratelimit_header_is_honoured(hub: FakeHub, http: HubHttp, sleeps: Sleeps) -> None:
    hub.faults.add(Fault("status", route="resolve", status=429, ratelimit='"api";r=0;t=55'))
    remote = await http.fetch_header(hub.resolve_url(*TINY))
    assert sleeps == [55.0]
    assert remote.waited == 55.0


async def test_retry_after_beyond_the_wait_budget_fails_fast(hub: FakeHub, sleeps: Sleeps) -> None:
    hub.faults.add(Fault("status", route="cdn", status=429, retry_after="3600", times=None))
    options = HttpOptions(endpoint=hub.endpoint, retry=RetryPolicy(max_attempts=5, max_total_wait=60.0))
    async with HubHttp(options, sleep=sleeps) as http:
        with pytest.raises(RateLimited) as info:
            await http.fetch_header(hub.resolve_url(*TINY))
    assert sleeps == []
    assert info.value.retry_after == 3600.0
    assert info.value.status == 429
    assert info.value.request_id and info.value.request_id.startswith("fake-")


async def test_malformed_retry_after_is_backoff_not_a_crash(
    hub: FakeHub, http: HubHttp, sleeps: Sleeps
) -> None:
    hub.faults.add(Fault("status", route="cdn", status=429, retry_after="soon", times=1))
    remote = await http.fetch_header(hub.resolve_url(*TINY))
    assert remote.retries == 1
    assert len(sleeps) == 1 and 0 < sleeps[0] <= FAST_RETRY.max_delay  # our own backoff
    hub.faults.add(Fault("status", route="cdn", status=429, retry_after="soon", times=None))
    with pytest.raises(RateLimited) as info:
        await http.fetch_header(hub.resolve_url(*TINY))
    assert info.value.retry_after is None


@pytest.mark.parametrize("status", [500, 503])
async def test_5xx_then_success(hub: FakeHub, http: HubHttp, sleeps: Sleeps, status: int) -> None:
    hub.faults.add(Fault("status", route="*", status=status, times=1))
    remote = await http.fetch_header(hub.resolve_url(*TINY))
    assert remote.retries == 1
    assert len(sleeps) == 1 and 0 < sleeps[0] <= FAST_RETRY.max_delay


async def test_5xx_forever_gives_up_after_max_attempts(hub: FakeHub, http: HubHttp, sleeps: Sleeps) -> None:
    hub.faults.add(Fault("status", route="cdn", status=503, times=None))
    with pytest.raises(ServerError):
        await http.fetch_header(hub.resolve_url(*TINY))
    assert len(hub.requests_to("cdn")) == FAST_RETRY.max_attempts
    assert len(sleeps) == FAST_RETRY.max_attempts - 1


async def test_reset_mid_body_then_success(hub: FakeHub, http: HubHttp) -> None:
    hub.faults.add(Fault("reset", route="cdn", after_bytes=4096))
    remote = await http.fetch_header(hub.resolve_url(*BIG))
    assert remote.retries == 1
    assert hub.requests_to("cdn")[0].faults == ["reset"]
    assert len(remote.header.get("tokenizer.ggml.tokens")) == 262_144


async def test_reset_forever_is_a_connection_error(hub: FakeHub, http: HubHttp) -> None:
    hub.faults.add(Fault("reset", route="cdn", after_bytes=100, times=None))
    with pytest.raises(HubConnectionError):
        await http.fetch_header(hub.resolve_url(*TINY))


async def test_truncated_body_is_typed_error_after_retries(hub: FakeHub, http: HubHttp) -> None:
    hub.faults.add(Fault("truncate", route="cdn", after_bytes=1000, times=None))
    with pytest.raises(TruncatedBody) as info:
        await http.fetch_header(hub.resolve_url(*TINY))
    assert len(hub.requests_to("cdn")) == FAST_RETRY.max_attempts
    assert info.value.code == "truncated_body"


async def test_truncated_once_then_success(hub: FakeHub, http: HubHttp) -> None:
    hub.faults.add(Fault("truncate", route="cdn", after_bytes=1000))
    remote = await http.fetch_header(hub.resolve_url(*TINY))
    assert remote.retries == 1


@pytest.mark.parametrize("ranged", [True, False])
async def test_compressed_body_is_refused_and_read_again(hub: FakeHub, http: HubHttp, ranged: bool) -> None:
    if not ranged:
        hub.faults.add(Fault("ignore_range", route="cdn", times=None))
    hub.faults.add(Fault("gzip", route="cdn", times=1))
    remote = await http.fetch_header(hub.resolve_url(*TINY))
    assert remote.header.get("general.name") == "Tiny Llama"
    assert remote.retries == 1
    hub.faults.add(Fault("gzip", route="cdn", times=None))
    with pytest.raises(EncodedBody) as info:
        await http.fetch_header(hub.resolve_url(*TINY))
    assert info.value.status == (206 if ranged else 200)


@pytest.mark.parametrize("which", ["real", "synthetic"])
async def test_range_ignored_reads_only_the_header(hub: FakeHub, http: HubHttp, which: str) -> None:
    repo_id, path = GEMMA if which == "real" else BIG
    if hub.corpus.get(repo_id) is None:
        pytest.skip("gemma3 sample is not cached")
    hub.faults.add(Fault("ignore_range", route="cdn", times=None))
    window = 1 * MiB
    remote = await http.fetch_header(hub.resolve_url(repo_id, path), first_window=window)
    [cdn] = hub.requests_to("cdn")
    assert cdn.status == 200
    assert remote.requests == 1
    assert remote.bytes_fetched <= remote.header.data_offset + window
    # The server may have pushed a few socket buffers more, never the file.
    await asyncio.sleep(0.05)
    assert cdn.bytes_sent < remote.file_size / 4
    assert remote.file_size == hub.corpus.repos[repo_id].file(path).blob.size  # type: ignore[union-attr]


async def test_file_changing_between_reads_is_file_changed(hub: FakeHub, http: HubHttp) -> None:
    hub.faults.add(Fault("change", route="cdn", skip=1))
    with pytest.raises(FileChanged) as info:
        await http.fetch_header(hub.resolve_url(*BIG))
    second = hub.requests_to("cdn")[1]
    assert second.headers.get("If-Range", "").startswith('"')
    assert second.status == 200  # If-Range did not match: the server offered the new file
    assert info.value.code == "file_changed"


async def test_416_is_typed_error(hub: FakeHub, http: HubHttp) -> None:
    with pytest.raises(RangeNotSatisfiable) as info:
        await http.fetch_header(hub.resolve_url("synth/empty", "empty.gguf"))
    assert info.value.status == 416
    assert len(hub.requests_to("cdn")) == 1  # not retried


async def test_budget_exceeded_is_header_too_large(hub: FakeHub, http: HubHttp) -> None:
    with pytest.raises(HeaderTooLarge) as info:
        await http.fetch_header(hub.resolve_url(*BIG), max_header_bytes=3 * MiB)
    assert info.value.budget == 3 * MiB
    assert info.value.needed > 3 * MiB
    assert sum(r.bytes_sent for r in hub.requests_to("cdn")) <= 3 * MiB


async def test_missing_file_and_gated_repo(hub: FakeHub, sleeps: Sleeps) -> None:
    async with HubHttp(HttpOptions(endpoint=hub.endpoint, retry=FAST_RETRY), sleep=sleeps) as anonymous:
        with pytest.raises(EntryNotFound):
            await anonymous.fetch_header(hub.resolve_url("synth/tiny-llama-GGUF", "nope.gguf"))
        with pytest.raises(GatedRepo):
            await anonymous.fetch_header(hub.resolve_url("other/vision-GGUF", "vision-Q4_0.gguf"))
    assert sleeps == []
    async with HubHttp(HttpOptions(endpoint=hub.endpoint, token=TOKEN)) as authed:
        remote = await authed.fetch_header(hub.resolve_url("other/vision-GGUF", "mmproj-vision-F16.gguf"))
    assert remote.header.get("general.type") == "mmproj"


async def test_bare_session_and_per_host_limit(hub: FakeHub) -> None:
    hub.faults.add(Fault("latency", route="cdn", delay=0.02, times=None))
    async with aiohttp.ClientSession() as session:
        remote = await fetch_header(session, hub.resolve_url(*TINY))
        assert remote.header.get("general.name") == "Tiny Llama"
        assert not session.closed  # a borrowed session is left to its owner
        options = HttpOptions(endpoint=hub.endpoint, per_host_concurrency=2)
        client = HubHttp(options, session=session)
        urls = [
            hub.resolve_url("synth/tiny-llama-GGUF", f"tiny-llama-{q}.gguf")
            for q in ("Q4_K_M", "Q8_0", "F16")
        ]
        results = await asyncio.gather(*(client.fetch_header(u) for u in urls * 3))
    assert len(results) == 9
    assert hub.max_inflight["cdn"] <= 2


def test_retry_hint_parses_both_headers() -> None:
    assert retry_hint({"Retry-After": "7"}) == 7.0
    assert retry_hint({"RateLimit": '"api";r=0;t=55'}) == 55.0
    assert retry_hint({"RateLimit": '"api";r=10;t=55'}) is None  # quota left: not the reason
    assert retry_hint({"Retry-After": "2", "RateLimit": '"api";r=0;t=9'}) == 9.0
    assert retry_hint({}) is None
    assert retry_hint({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0  # a date in the past
    for garbage in ("soon", "1 minute", "-"):
        assert retry_hint({"Retry-After": garbage}) is None
    assert retry_hint({"Retry-After": "soon", "RateLimit": '"api";r=0;t=9'}) == 9.0


async def test_synthetic_many_architectures_parse(hub: FakeHub, http: HubHttp) -> None:
    corpus = Corpus(
        [
            gguf_repo(
                "x/moe-GGUF",
                ModelSpec(arch="qwen3moe", n_experts=4, vocab_size=2048, tokenizer="gpt2"),
                quants=("IQ4_XS",),
            ),
            gguf_repo("x/lora-GGUF", ModelSpec(kind="lora"), quants=("F16",)),
        ]
    )
    async with FakeHub(corpus) as other, HubHttp(HttpOptions(endpoint=other.endpoint)) as client:
        moe = await client.fetch_header(other.resolve_url("x/moe-GGUF", "moe-IQ4_XS.gguf"))
        lora = await client.fetch_header(other.resolve_url("x/lora-GGUF", "lora-F16.gguf"))
    assert moe.header.get("qwen3moe.expert_count") == 4
    assert lora.header.get("adapter.type") == "lora"


async def test_split_artifact_reads_every_shard(hub: FakeHub, http: HubHttp) -> None:
    url = hub.resolve_url("synth/split-moe-GGUF", "split-moe-Q8_0-00003-of-00003.gguf").replace(
        "/resolve/", "/blob/"
    )
    remote = await fetch_artifact_headers(http, url)
    assert [r.header.get("split.no") for r in remote] == [0, 1, 2]
    assert remote[0].header.get("general.architecture") == "qwen3moe"
    assert sum(len(r.header.tensors) for r in remote) == remote[0].header.get("split.tensors.count")
    assert all(r.bytes_fetched <= SHARD_WINDOW for r in remote[1:])
    assert [r.url for r in remote] == shard_urls(normalize_url(url))


async def test_cli_entry_point_reads_with_settings(hub: FakeHub) -> None:
    settings = HubSettings(endpoint=hub.endpoint, token=TOKEN)
    remote = await read_remote_artifact_headers(hub.resolve_url(*TINY), settings)
    assert len(remote) == 1 and remote[0].header.get("general.name") == "Tiny Llama"
    assert not any(r.authorization for r in hub.requests_to("cdn"))


async def test_slow_server_times_out_with_retries(hub: FakeHub, sleeps: Sleeps) -> None:
    hub.faults.add(Fault("latency", route="cdn", delay=0.5, times=None))
    retry = RetryPolicy(max_attempts=2, base_delay=0.01)
    options = HttpOptions(endpoint=hub.endpoint, read_timeout=0.1, retry=retry)
    async with HubHttp(options, sleep=sleeps) as http:
        with pytest.raises(HubTimeout) as info:
            await http.fetch_header(hub.resolve_url(*TINY))
    assert info.value.code == "timeout"
    assert len(hub.requests_to("cdn")) == 2 and len(sleeps) == 1


async def test_server_capping_ranges_is_followed_up(hub: FakeHub, http: HubHttp) -> None:
    hub.faults.add(Fault("short_range", route="cdn", after_bytes=8192, times=None))
    remote = await http.fetch_header(hub.resolve_url(*TINY), first_window=2 * MiB)
    assert remote.header.data_offset > 2 * 8192  # so the header takes three capped ranges
    assert remote.retries == 0 and remote.requests >= 3
    assert remote.header.get("general.name") == "Tiny Llama"
    assert all(r.status == 206 for r in hub.requests_to("cdn"))


async def test_expired_cdn_url_is_resolved_again(hub: FakeHub, http: HubHttp) -> None:
    # The second range goes to the cached CDN URL; its signature "expired": back to the hub.
    hub.faults.add(Fault("status", route="cdn", status=403, skip=1))
    remote = await http.fetch_header(hub.resolve_url(*BIG))
    assert remote.requests == 2 and remote.retries == 0
    assert [r.route for r in hub.requests] == ["resolve", "cdn", "cdn", "resolve", "cdn"]
    assert [r.status for r in hub.requests_to("cdn")] == [206, 403, 206]


async def test_range_ignored_only_on_the_second_read(hub: FakeHub, http: HubHttp) -> None:
    hub.faults.add(Fault("ignore_range", route="cdn", skip=1, times=None))
    remote = await http.fetch_header(hub.resolve_url(*BIG))
    assert [r.status for r in hub.requests_to("cdn")] == [206, 200]
    assert len(remote.header.get("tokenizer.ggml.tokens")) == 262_144
    # The restart at byte 0 re-reads the first window once; still nowhere near the file.
    assert remote.bytes_fetched <= 2 * MiB + remote.header.data_offset + 2 * MiB


async def test_short_200_disagreeing_with_the_listed_size_is_file_changed(
    hub: FakeHub, http: HubHttp
) -> None:
    # A server ignoring Range that also cuts the body, framed honestly: alone it would pass
    # for a 1000-byte file; the size the hub lists tells it apart, so it is retried later.
    hub.faults.add(
        Fault("ignore_range", route="cdn", times=None), Fault("truncate", route="cdn", after_bytes=1000)
    )
    size = hub.corpus.repos[TINY[0]].file(TINY[1]).blob.size  # type: ignore[union-attr]
    with pytest.raises(FileChanged, match="hub lists"):
        await http.fetch_header(hub.resolve_url(*TINY), expected_size=size)
    hub.faults.clear()
    remote = await http.fetch_header(hub.resolve_url(*TINY), expected_size=size)
    assert remote.file_size == size
