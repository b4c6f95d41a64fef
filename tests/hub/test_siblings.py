"""Sibling header reads against the fake hub over loopback, with real gguf-py headers.

Every sibling read here is compared with a full read of the same file: the facts must be
equal, and every disagreement must fall back to a full read, counted by its reason.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from registry.gguf.facts import derive_facts
from registry.gguf.facts_model import Facts
from registry.gguf.reader import parse_header
from registry.hub.http import HttpOptions, HubHttp
from registry.hub.siblings import Leader, SiblingReader, SiblingStats, leaders_first, sibling_families
from tests.fakehub import FakeHub, Fault
from tests.fakehub.corpus import Blob, Corpus, RepoFile, SynthBlob, gguf_repo
from tests.fakehub.synth import ModelSpec
from tests.fakehub.testing import FAST_RETRY, TOKEN, Sleeps

REPO = "org/Tiny-GGUF"
SPEC = ModelSpec(name="Tiny", vocab_size=32000, tokenizer="gpt2", pre="qwen2")
QUANTS = ("Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0")


class PatchedBlob(Blob):
    """A synthetic file with some header bytes replaced, and optionally more bytes at its end."""

    def __init__(self, base: SynthBlob, patches: dict[int, bytes], extra: int = 0) -> None:
        self.base = base
        self.patches = patches
        self._size = base.size + extra
        self.sha256 = f"{base.sha256[:48]}{len(patches):08x}{extra:08x}"

    def read(self, start: int, end: int) -> bytes:
        data = bytearray(self.base.read(start, min(end, self.base.size)))
        data += b"\0" * (min(end, self.size) - start - len(data))
        for at, patch in self.patches.items():
            for i, byte in enumerate(patch):
                if start <= at + i < start + len(data):
                    data[at + i - start] = byte
        return bytes(data)


def _corpus(*extra: RepoFile, spec: ModelSpec = SPEC) -> Corpus:
    return Corpus([gguf_repo(REPO, spec, quants=QUANTS, extra_files=extra)])


def _changed_tokens(spec: ModelSpec, fraction: float, seed: int = 7) -> dict[int, bytes]:
    """Patches that change `fraction` of the tokens at random places, keeping every length."""
    blob = SynthBlob(replace(spec, quant="Q4_0"))
    header = parse_header(blob.file.header)
    tokens = header.fields["tokenizer.ggml.tokens"].value
    offsets = tokens.element_offsets()
    rng = random.Random(seed)
    picked = rng.sample(range(3, tokens.count), int(tokens.count * fraction))
    return {int(offsets[i + 1]) - 1: b"z" for i in picked}  # the token's last byte: a hex digit before


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
async def http(sleeps: Sleeps) -> AsyncIterator[HubHttp]:
    async with HubHttp(HttpOptions(token=TOKEN, retry=FAST_RETRY), sleep=sleeps) as client:
        yield client


async def _leader(hub: FakeHub, http: HubHttp, path: str) -> Leader:
    size = hub.corpus.get(REPO).file(path).blob.size  # type: ignore[union-attr]
    remote = await http.fetch_header(hub.resolve_url(REPO, path), expected_size=size)
    return Leader.of(path, remote, derive_facts([remote.header], file_sizes=[remote.file_size]))


async def _full_facts(hub: FakeHub, http: HubHttp, path: str) -> Facts:
    remote = await http.fetch_header(hub.resolve_url(REPO, path))
    return derive_facts([remote.header], file_sizes=[remote.file_size])


async def _sibling(hub: FakeHub, reader: SiblingReader, leader: Leader, path: str):  # type: ignore[no-untyped-def]
    size = hub.corpus.get(REPO).file(path).blob.size  # type: ignore[union-attr]
    return await reader.read(leader, hub.resolve_url(REPO, path), path=path, expected_size=size)


def test_families_group_quants_of_one_model_and_leave_the_rest_out() -> None:
    paths = [
        "Tiny-Q4_K_M.gguf", "Tiny-Q8_0.gguf", "Tiny-UD-Q4_K_XL.gguf", "mmproj-Tiny-F16.gguf",
        "Tiny.imatrix.gguf", "Other-7B-Q4_K_M.gguf", "Big-Q4_K_M-00001-of-00002.gguf",
        "Big-Q4_K_M-00002-of-00002.gguf", "sub/Tiny-Q4_K_M.gguf", "Tiny-LoRA-F16.gguf",
    ]  # fmt: skip
    families = sibling_families(paths)
    tiny = ("Tiny-Q4_K_M.gguf", "Tiny-Q8_0.gguf", "Tiny-UD-Q4_K_XL.gguf")
    assert families == {p: tiny for p in tiny}
    # Shard 1 of a split quant holds the vocabulary: it is a quant like the others.
    split = sibling_families(["Big-Q4_K_M.gguf", "Big-Q8_0-00001-of-00002.gguf", "Big-Q8_0-00002-of-00002.gguf"])
    assert split["Big-Q4_K_M.gguf"] == ("Big-Q4_K_M.gguf", "Big-Q8_0-00001-of-00002.gguf")
    # A single file leads: its tensor infos are as long as a sibling's, a shard's are not.
    order = ["Big-F16-00001-of-00002.gguf", "Big-Q4_K_M.gguf", "mmproj-Big-F16.gguf"]
    assert leaders_first(order, sibling_families(order)) == [
        "Big-Q4_K_M.gguf", "Big-F16-00001-of-00002.gguf", "mmproj-Big-F16.gguf"
    ]


async def test_siblings_read_against_the_leader_have_the_facts_of_a_full_read(http: HubHttp) -> None:
    async with FakeHub(_corpus(), tokens={TOKEN}) as hub:
        paths = [f"Tiny-{q}.gguf" for q in QUANTS]
        leader = await _leader(hub, http, paths[0])
        stats = SiblingStats()
        reader = SiblingReader(http, samples=16, stats=stats, rng=random.Random(1))
        header_bytes = leader.header.data_offset
        for path in paths[1:]:
            hub.requests.clear()
            remote, how = await _sibling(hub, reader, leader, path)
            assert how.mode == "sibling" and how.leader == paths[0] and how.samples >= 3 * len(leader.spans)
            # One multi-range request (the redirect to the CDN aside), a small part of the header.
            assert remote.requests == 1
            assert len(hub.requests_to("cdn", file=path)) == 1
            assert leader.facts is not None
            facts = derive_facts([remote.header], file_sizes=[remote.file_size], leader=(leader.header, leader.facts))
            assert facts == await _full_facts(hub, http, path)
            assert remote.bytes_fetched < header_bytes * 0.2
            # The vocabulary is the leader's parsed array, not parsed again.
            tokens = remote.header.fields["tokenizer.ggml.tokens"].value
            assert tokens is leader.header.fields["tokenizer.ggml.tokens"].value
        assert stats.reads == len(paths) - 1 and not stats.fallbacks


async def test_a_sibling_with_a_longer_prefix_is_read_shifted(http: HubHttp) -> None:
    longer = replace(SPEC, quant="Q2_K", name="Tiny with a much longer general.name value")
    corpus = _corpus(RepoFile("Tiny-Q2_K.gguf", SynthBlob(longer)))
    async with FakeHub(corpus, tokens={TOKEN}) as hub:
        leader = await _leader(hub, http, "Tiny-Q4_K_M.gguf")
        reader = SiblingReader(http)
        remote, how = await _sibling(hub, reader, leader, "Tiny-Q2_K.gguf")
        assert how.mode == "sibling"
        assert remote.requests == 2  # the first bytes told the shift; the second asked shifted
        facts = derive_facts([remote.header], file_sizes=[remote.file_size])
        assert facts == await _full_facts(hub, http, "Tiny-Q2_K.gguf")


@pytest.mark.parametrize(
    ("name", "blob", "reason"),
    [
        # 1% of the tokens changed at random places, every length kept: only samples see it.
        ("Tiny-Q2_K.gguf", lambda: PatchedBlob(SynthBlob(replace(SPEC, quant="Q2_K")), _changed_tokens(SPEC, 0.01)), "sample_differs"),
        # A vocabulary of another length.
        ("Tiny-Q2_K.gguf", lambda: SynthBlob(replace(SPEC, quant="Q2_K", vocab_size=32064)), "layout"),
        # Same tokens, fewer merges: the leader's merges bytes are not there.
        ("Tiny-Q2_K.gguf", lambda: SynthBlob(replace(SPEC, quant="Q2_K", merges=31000)), "sample_differs"),
        # Another architecture under a sibling's name, the same vocabulary.
        ("Tiny-Q2_K.gguf", lambda: SynthBlob(replace(SPEC, quant="Q2_K", arch="qwen2")), "architecture"),
        # The listed size is not what the header's tensors add up to.
        ("Tiny-Q2_K.gguf", lambda: PatchedBlob(SynthBlob(replace(SPEC, quant="Q2_K")), {}, extra=4096), "size_proof"),
    ],
    ids=["changed_tokens", "vocab_length", "merges", "architecture", "size_proof"],
)
async def test_each_disagreement_falls_back_to_a_full_read_with_the_same_facts(
    http: HubHttp, name: str, blob: object, reason: str
) -> None:
    corpus = _corpus(RepoFile(name, blob()))  # type: ignore[operator]
    async with FakeHub(corpus, tokens={TOKEN}) as hub:
        leader = await _leader(hub, http, "Tiny-Q4_K_M.gguf")
        stats = SiblingStats()
        reader = SiblingReader(http, stats=stats, rng=random.Random(3))
        remote, how = await _sibling(hub, reader, leader, name)
        assert (how.mode, how.fallback) == ("full", reason)
        assert stats.fallbacks == {reason: 1} and stats.reads == 0
        facts = derive_facts([remote.header], file_sizes=[remote.file_size])
        assert facts == await _full_facts(hub, http, name)
        # The bytes of the attempt count too.
        assert remote.requests >= 2


@pytest.mark.parametrize("mode", ["whole", "first"])
async def test_a_server_without_multi_range_is_read_by_single_ranges(http: HubHttp, mode: str) -> None:
    faults = [Fault("no_multirange", times=None, multirange=mode)]  # type: ignore[arg-type]
    async with FakeHub(_corpus(), faults=faults, tokens={TOKEN}) as hub:
        leader = await _leader(hub, http, "Tiny-Q4_K_M.gguf")
        stats = SiblingStats()
        reader = SiblingReader(http, stats=stats)
        header_bytes = leader.header.data_offset
        for path in ("Tiny-Q5_K_M.gguf", "Tiny-Q6_K.gguf"):
            hub.requests.clear()
            remote, how = await _sibling(hub, reader, leader, path)
            assert how.mode == "sibling"
            # Prefix, the bytes between the arrays, one sample in each, the tail: a request each.
            assert remote.requests <= 2 * len(leader.spans) + 2 + (path == "Tiny-Q5_K_M.gguf")
            assert remote.bytes_fetched < header_bytes * 0.2
            assert derive_facts([remote.header], file_sizes=[remote.file_size]) == await _full_facts(hub, http, path)
        # The first sibling found out; the second sent single ranges only.
        multi = [r for r in hub.requests_to("cdn") if r.range and "," in r.range]
        assert multi == []
        assert stats.reads == 2 and not stats.fallbacks


async def test_a_server_without_ranges_is_read_in_full_and_not_asked_again(http: HubHttp) -> None:
    async with FakeHub(_corpus(), tokens={TOKEN}) as hub:
        leader = await _leader(hub, http, "Tiny-Q4_K_M.gguf")
        hub.faults.faults.append(Fault("ignore_range", times=None))
        stats = SiblingStats()
        reader = SiblingReader(http, stats=stats)
        for path in ("Tiny-Q5_K_M.gguf", "Tiny-Q6_K.gguf"):
            remote, how = await _sibling(hub, reader, leader, path)
            assert how.mode == "full"
            assert derive_facts([remote.header], file_sizes=[remote.file_size]) == await _full_facts(hub, http, path)
        assert stats.fallbacks == {"no_multirange": 1, "no_ranges": 1}


async def test_a_sibling_that_changes_between_its_reads_is_read_in_full(http: HubHttp) -> None:
    longer = replace(SPEC, quant="Q2_K", name="Tiny with a much longer general.name value")
    corpus = _corpus(RepoFile("Tiny-Q2_K.gguf", SynthBlob(longer)))
    # The second request of the shifted read finds a new version (new ETag).
    faults = [Fault("change", file="Tiny-Q2_K.gguf", skip=1, times=1)]
    async with FakeHub(corpus, faults=faults, tokens={TOKEN}) as hub:
        leader = await _leader(hub, http, "Tiny-Q4_K_M.gguf")
        stats = SiblingStats()
        reader = SiblingReader(http, stats=stats)
        remote, how = await _sibling(hub, reader, leader, "Tiny-Q2_K.gguf")
        assert (how.mode, how.fallback) == ("full", "file_changed")
        assert remote.header.get("general.name") == longer.name


async def test_samples_setting_sets_how_many_ranges_are_compared(http: HubHttp) -> None:
    async with FakeHub(_corpus(), tokens={TOKEN}) as hub:
        leader = await _leader(hub, http, "Tiny-Q4_K_M.gguf")
        few = (await _sibling(hub, SiblingReader(http, samples=2), leader, "Tiny-Q8_0.gguf"))[1].samples
        many = (await _sibling(hub, SiblingReader(http, samples=24), leader, "Tiny-Q8_0.gguf"))[1].samples
        assert few < many


async def test_a_sibling_with_a_longer_tail_takes_one_more_range(http: HubHttp) -> None:
    imatrix = (("quantize.imatrix.file", "/data/" + "x" * 20000 + ".imatrix"), ("quantize.imatrix.entries_count", 196))
    corpus = _corpus(RepoFile("Tiny-Q2_K.gguf", SynthBlob(replace(SPEC, quant="Q2_K", extra=imatrix))))
    async with FakeHub(corpus, tokens={TOKEN}) as hub:
        leader = await _leader(hub, http, "Tiny-Q4_K_M.gguf")
        remote, how = await _sibling(hub, SiblingReader(http), leader, "Tiny-Q2_K.gguf")
        assert how.mode == "sibling" and remote.requests == 2
        assert remote.header.get("quantize.imatrix.entries_count") == 196
        facts = derive_facts([remote.header], file_sizes=[remote.file_size])
        assert facts == await _full_facts(hub, http, "Tiny-Q2_K.gguf")
