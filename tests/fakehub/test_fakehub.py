"""The fake hub itself: synthetic files are real GGUF, HTTP semantics match the hub's."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import gguf
import pytest

from registry.gguf.reader import parse_header
from tests.fakehub import Corpus, FakeHub, Fault, ModelSpec, Repo, RepoFile, gguf_repo, synthetic_corpus
from tests.fakehub.corpus import SynthBlob, _synth, multiquant_corpus, sibling_corpus
from tests.fakehub.synth import build, reference_header
from tests.fakehub.testing import TOKEN

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def hub() -> AsyncIterator[FakeHub]:
    corpus = Corpus(
        [
            gguf_repo(
                "a/tiny-GGUF", ModelSpec(name="Tiny"), quants=("Q4_K_M", "Q8_0"), card={"license": "mit"}
            ),
            Repo("a/secret-GGUF", [RepoFile("s.gguf", SynthBlob(ModelSpec()))], private=True),
        ]
    )
    async with FakeHub(corpus, tokens={TOKEN}) as h:
        yield h


@pytest.mark.parametrize(
    ("spec", "shard"),
    [
        (ModelSpec(), None),
        (ModelSpec(arch="qwen3moe", n_experts=4, quant="Q8_0", tokenizer="gpt2", vocab_size=4096), None),
        (ModelSpec(n_layers=6), (2, 3)),
        (ModelSpec(kind="lora"), None),
        (ModelSpec(arch="clip", kind="mmproj"), None),
    ],
)
def test_synthetic_file_is_valid_gguf(tmp_path: Path, spec: ModelSpec, shard: tuple[int, int] | None) -> None:
    synth = build(spec, shard=shard)
    path = tmp_path / "f.gguf"
    with path.open("wb") as f:
        f.write(synth.header)
        f.truncate(synth.size)
    reference = gguf.GGUFReader(path)  # gguf-py, the format's reference reader
    ours = parse_header(synth.header, file_size=synth.size)
    assert reference.data_offset == ours.data_offset == len(synth.header)
    assert [t.name for t in reference.tensors] == [t.name for t in ours.tensors]
    assert max(t.data_offset + t.n_bytes for t in reference.tensors) <= synth.size
    if shard is not None:
        assert ours.get("split.no") == shard[0] - 1
        assert "general.architecture" not in ours.fields


@pytest.mark.parametrize(
    ("spec", "shard"),
    [
        (ModelSpec(), None),
        (ModelSpec(tokenizer="gpt2", pre="qwen2", vocab_size=2048, merges=3000), None),
        (ModelSpec(quant="Q4_K_M", quantized=True, imatrix=True, n_layers=8, vocab_edit=7), None),
        (ModelSpec(arch="qwen3moe", n_experts=4, quant="Q8_0", base_models=(("B", "org", "https://x/b"),)), None),
        (ModelSpec(n_layers=6), (1, 3)),
        (ModelSpec(n_layers=6), (3, 3)),
        (ModelSpec(kind="lora", license="mit", finetune="chat"), None),
        (ModelSpec(arch="clip", kind="mmproj"), None),
        (ModelSpec(kind="imatrix"), None),
        (ModelSpec(extra=(("a.flag", True), ("a.n", 7), ("a.x", 0.5), ("a.s", "é"), ("a.list", [1, 2]))), None),
    ],
)
def test_synthetic_header_is_byte_for_byte_what_gguf_py_writes(
    tmp_path: Path, spec: ModelSpec, shard: tuple[int, int] | None
) -> None:
    synth = build(spec, shard=shard)
    assert synth.header == reference_header(spec, tmp_path / "ref.gguf", shard=shard)
    # Read in pieces across the segment boundaries and past the header: the same bytes, then zeros.
    header = synth.header
    for start, end in ((0, 17), (5, len(header) - 3), (len(header) - 10, len(header) + 20), (1, synth.size)):
        want = header[start:end] + bytes(max(0, min(end, synth.size) - max(start, len(header))))
        assert synth.read(start, end) == want


async def test_ranges_etag_and_416(hub: FakeHub) -> None:
    url = hub.resolve_url("a/tiny-GGUF", "tiny-Q4_K_M.gguf")
    blob = hub.corpus.repos["a/tiny-GGUF"].files[0].blob
    async with aiohttp.ClientSession() as s:
        async with s.head(url, allow_redirects=False) as r:
            assert r.status == 302
            assert r.headers["X-Linked-Size"] == str(blob.size)
            assert r.headers["X-Repo-Commit"] == hub.corpus.repos["a/tiny-GGUF"].sha
            cdn = r.headers["Location"]
        assert cdn.startswith(hub.cdn_url)
        async with s.get(cdn, headers={"Range": "bytes=0-99"}) as r:
            assert r.status == 206
            assert r.headers["Content-Range"] == f"bytes 0-99/{blob.size}"
            assert r.headers["Accept-Ranges"] == "bytes"
            assert await r.read() == blob.read(0, 100)
            etag = r.headers["ETag"]
        async with s.get(cdn, headers={"Range": "bytes=-10"}) as r:
            assert r.status == 206 and len(await r.read()) == 10
        async with s.get(cdn, headers={"Range": f"bytes={blob.size}-"}) as r:
            assert r.status == 416
            assert r.headers["Content-Range"] == f"bytes */{blob.size}"
        async with s.get(cdn, headers={"Range": "bytes=0-9", "If-Range": etag}) as r:
            assert r.status == 206
        hub.change_file("a/tiny-GGUF", "tiny-Q4_K_M.gguf")
        async with s.get(cdn, headers={"Range": "bytes=0-9", "If-Range": etag}) as r:
            assert r.status == 200 and r.headers["ETag"] != etag
        async with s.get(hub.resolve_url("a/tiny-GGUF", "README.md")) as r:
            assert r.status == 200 and b"license" in await r.read()  # git files come from the hub itself
    assert [r.status for r in hub.requests_to("cdn")] == [206, 206, 416, 206, 200]


async def test_faults_are_counted_per_match(hub: FakeHub) -> None:
    hub.faults.add(
        Fault(
            "status",
            route="cdn",
            file="*Q8_0*",
            status=429,
            retry_after="1",
            ratelimit='"api";r=0;t=1',
            skip=1,
        )
    )
    url = hub.resolve_url("a/tiny-GGUF", "tiny-Q8_0.gguf")
    async with aiohttp.ClientSession() as s:
        statuses = []
        for _ in range(3):
            async with s.get(url, headers={"Range": "bytes=0-9"}) as r:
                statuses.append(r.status)
                if r.status == 429:
                    assert r.headers["Retry-After"] == "1"
                    assert r.headers["RateLimit"] == '"api";r=0;t=1'
    assert statuses == [206, 429, 206]


async def test_private_repos_need_a_token(hub: FakeHub) -> None:
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{hub.endpoint}/api/models/a/secret-GGUF") as r:
            assert r.status == 401 and r.headers["X-Error-Code"] == "RepoNotFound"
        async with s.get(f"{hub.endpoint}/api/models", params={"filter": "gguf"}) as r:
            assert [m["id"] for m in await r.json()] == ["a/tiny-GGUF"]
        auth = {"Authorization": f"Bearer {TOKEN}"}
        async with s.get(f"{hub.endpoint}/api/models/a/secret-GGUF", headers=auth) as r:
            assert r.status == 200
        async with s.get(
            f"{hub.endpoint}/api/models", params={"expand": ["sha", "cardData"]}, headers=auth
        ) as r:
            first = (await r.json())[0]
            assert set(first) == {"_id", "id", "sha", "cardData"}


async def test_ids_in_any_case_and_renamed_repos_redirect(hub: FakeHub) -> None:
    """As on the hub: an id in another letter case answers with the repo's own spelling, and
    a renamed repo's old id redirects (307) its API and file URLs to the new id."""
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{hub.endpoint}/api/models/A/Tiny-gguf") as r:
            assert r.status == 200 and (await r.json())["id"] == "a/tiny-GGUF"
        hub.corpus.rename("a/tiny-GGUF", "b/tiny-GGUF")
        path = "/a/tiny-GGUF/resolve/main/tiny-Q8_0.gguf"
        for old, new in [("/api/models/A/TINY-GGUF?blobs=true", "/api/models/b/tiny-GGUF?blobs=true"),
                         (path, path.replace("a/", "b/"))]:  # fmt: skip
            async with s.get(f"{hub.endpoint}{old}", allow_redirects=False) as r:
                assert (r.status, r.headers["Location"]) == (307, new)
        async with s.get(f"{hub.endpoint}/api/models/a/tiny-GGUF") as r:
            assert r.status == 200 and (await r.json())["id"] == "b/tiny-GGUF"
        hub.corpus.repos.pop("b/tiny-GGUF")  # deleted after the rename
        async with s.get(f"{hub.endpoint}/api/models/a/tiny-GGUF", allow_redirects=False) as r:
            assert r.status == 401 and r.headers["X-Error-Code"] == "RepoNotFound"


def test_thousand_repo_corpus_is_lazy() -> None:
    before = _synth.cache_info().misses
    corpus = synthetic_corpus(1000)
    files = [f for repo in corpus for f in repo.files if f.path.endswith(".gguf")]
    assert len(corpus) == 1000 and len(files) == 3000
    assert _synth.cache_info().misses == before  # no header built until a request needs one


async def test_cli_serves_a_synthetic_corpus() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.fakehub",
        "--port",
        "0",
        "--repos",
        "5",
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        endpoint = line.split()[2]
        assert endpoint.startswith("http://127.0.0.1:")
        async with aiohttp.ClientSession() as s, s.get(f"{endpoint}/api/models") as r:
            assert len(await r.json()) == 5
    finally:
        proc.terminate()
        await proc.wait()


async def _parts(resp: aiohttp.ClientResponse) -> list[tuple[str, bytes]]:
    """(Content-Range, body) of every part of a multipart/byteranges answer."""
    parts = []
    reader = aiohttp.MultipartReader.from_response(resp)
    while (part := await reader.next()) is not None:
        assert isinstance(part, aiohttp.BodyPartReader)
        parts.append((part.headers["Content-Range"], bytes(await part.read())))
    return parts


async def test_multi_range_answers_multipart_byteranges(hub: FakeHub) -> None:
    url = hub.resolve_url("a/tiny-GGUF", "tiny-Q4_K_M.gguf")
    blob = hub.corpus.repos["a/tiny-GGUF"].files[0].blob
    size = blob.size
    async with aiohttp.ClientSession() as s:
        async with s.get(url, headers={"Range": "bytes=0-99, 500-599,-10"}) as r:
            assert r.status == 206 and "Content-Range" not in r.headers
            assert r.content_type == "multipart/byteranges"
            raw = await r.read()
            assert int(r.headers["Content-Length"]) == len(raw)
            boundary = r.headers["Content-Type"].split("boundary=")[1]
            assert raw.startswith(f"\r\n--{boundary}\r\n".encode())
            assert raw.endswith(f"\r\n--{boundary}--\r\n".encode())
        async with s.get(url, headers={"Range": "bytes=0-99,500-599,-10"}) as r:
            assert await _parts(r) == [
                (f"bytes 0-99/{size}", blob.read(0, 100)),
                (f"bytes 500-599/{size}", blob.read(500, 600)),
                (f"bytes {size - 10}-{size - 1}/{size}", blob.read(size - 10, size)),
            ]
        # An unsatisfiable range among others is dropped; one range left is a plain 206.
        async with s.get(url, headers={"Range": f"bytes=8-15,{size}-{size + 9}"}) as r:
            assert r.status == 206 and r.headers["Content-Range"] == f"bytes 8-15/{size}"
            assert await r.read() == blob.read(8, 16)
        async with s.get(url, headers={"Range": f"bytes={size}-,{size + 5}-"}) as r:
            assert r.status == 416
        async with s.get(url, headers={"Range": "bytes=0-9,20-10"}) as r:
            assert r.status == 400
    served = [r.served for r in hub.requests_to("cdn")]
    assert served[:3] == [[(0, 100), (500, 600), (size - 10, size)]] * 2 + [[(8, 16)]]


@pytest.mark.parametrize("mode", ["whole", "first"])
async def test_server_without_multi_range(hub: FakeHub, mode: str) -> None:
    """`whole`: the header ignored, 200 and the whole file; `first`: a 206 of the first range only."""
    hub.faults.add(Fault("no_multirange", multirange=mode, times=None))  # type: ignore[arg-type]
    url = hub.resolve_url("a/tiny-GGUF", "tiny-Q8_0.gguf")
    blob = hub.corpus.repos["a/tiny-GGUF"].files[1].blob
    async with aiohttp.ClientSession() as s:
        async with s.get(url, headers={"Range": "bytes=100-199,300-399"}) as r:
            body = await r.read()
            if mode == "whole":
                assert r.status == 200 and "Content-Range" not in r.headers
                assert body == blob.read(0, blob.size)
            else:
                assert r.status == 206 and r.content_type == "application/octet-stream"
                assert r.headers["Content-Range"] == f"bytes 100-199/{blob.size}"
                assert body == blob.read(100, 200)
        async with s.get(url, headers={"Range": "bytes=100-199"}) as r:  # single ranges still work
            assert r.status == 206 and await r.read() == blob.read(100, 200)


async def test_too_many_ranges_get_the_whole_file(hub: FakeHub) -> None:
    url = hub.resolve_url("a/tiny-GGUF", "tiny-Q8_0.gguf")
    ranges = ",".join(f"{i * 10}-{i * 10 + 4}" for i in range(201))
    async with aiohttp.ClientSession() as s, s.get(url, headers={"Range": f"bytes={ranges}"}) as r:
        assert r.status == 200 and "Content-Range" not in r.headers


async def test_file_changed_between_reads(hub: FakeHub) -> None:
    """A re-upload after the listing: a new ETag, new bytes and size, the listing unchanged."""
    url = hub.resolve_url("a/tiny-GGUF", "tiny-Q8_0.gguf")
    old = hub.corpus.repos["a/tiny-GGUF"].files[1].blob
    new = SynthBlob(ModelSpec(name="Tiny v2", quant="Q8_0"))
    async with aiohttp.ClientSession() as s:
        async with s.get(url, headers={"Range": "bytes=0-1023"}) as r:
            etag = r.headers["ETag"]
            assert await r.read() == old.read(0, 1024)
        hub.change_file("a/tiny-GGUF", "tiny-Q8_0.gguf", new)
        async with s.get(url, headers={"Range": "bytes=0-1023,2048-2049", "If-Range": etag}) as r:
            assert r.status == 200 and r.headers["ETag"] != etag  # If-Range failed: the whole new file
            assert await r.read() == new.read(0, new.size)
        async with s.get(url, headers={"Range": "bytes=0-1023,2048-2049"}) as r:
            assert await _parts(r) == [
                (f"bytes 0-1023/{new.size}", new.read(0, 1024)),
                (f"bytes 2048-2049/{new.size}", new.read(2048, 2050)),
            ]
        async with s.get(f"{hub.endpoint}/api/models/a/tiny-GGUF", params={"blobs": "true"}) as r:
            listed = {f["rfilename"]: f.get("size") for f in (await r.json())["siblings"]}
            assert listed["tiny-Q8_0.gguf"] == old.size


def _tensor_end(header: bytes, size: int) -> int:
    """Data offset plus every tensor's size padded to the alignment, as gguf-py reads them."""
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".gguf") as f:
        f.write(header)
        f.truncate(size)
        f.flush()
        reader = gguf.GGUFReader(f.name)
        align = 32
        return reader.data_offset + sum(-(-int(t.n_bytes) // align) * align for t in reader.tensors)


def test_sibling_corpus_shapes() -> None:
    corpus = sibling_corpus()
    ggufs = {r.repo_id: [f for f in r.files if f.path.endswith(".gguf")] for r in corpus}
    quants = {repo: [f for f in files if isinstance(f.blob, SynthBlob) and f.blob.spec.quantized]
              for repo, files in ggufs.items()}  # fmt: skip
    assert all(8 <= len(q) <= 24 for q in quants.values())
    families = {f.blob.spec.vocab_size for files in quants.values() for f in files}  # type: ignore[attr-defined]
    assert {32_000, 49_152, 128_256, 151_936, 262_144} <= families
    llama3 = {f.path: f.blob for f in ggufs["sib/Meta-Llama-3.1-8B-Instruct-GGUF"]}
    for path in ("Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf", "Meta-Llama-3.1-8B-Instruct-Q8_0.gguf",
                 "Meta-Llama-3.1-8B-Instruct-IQ2_M.gguf", "Meta-Llama-3.1-8B-Instruct-Q4_0.gguf"):  # fmt: skip
        blob = llama3[path]
        header = parse_header(blob.file.header, file_size=blob.size)
        label = path.rsplit("-", 1)[1].removesuffix(".gguf")
        assert header.get("general.file_type") == gguf.LlamaFileType[f"MOSTLY_{label}"].value
        # Keys in llama-quantize's order: the imatrix keys last, on K and IQ quants only.
        assert ("quantize.imatrix.file" in header.fields) == (label not in ("Q8_0", "Q4_0"))
        assert list(header.fields).index("general.quantization_version") > list(header.fields).index(
            "tokenizer.ggml.merges"
        )
        assert len(header.get("tokenizer.ggml.merges")) == 280_147
        # The listed size is the data offset plus the aligned tensor sizes.
        assert header.data_offset + sum(-(-t.n_bytes // 32) * 32 for t in header.tensors) == blob.size
    # gguf-py, the reference reader, agrees (on a 32k vocabulary: it reads strings one by one).
    blob = corpus.repos["sib/Llama-2-7B-Chat-GGUF"].files[6].blob
    assert _tensor_end(blob.file.header, blob.size) == blob.size
    types = {t.name: t.type.name for t in parse_header(llama3["Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf"].file.header).tensors}  # fmt: skip
    assert types["blk.0.ffn_down.weight"] == "Q6_K" and types["blk.5.ffn_down.weight"] == "Q4_K"
    assert types["output.weight"] == "Q6_K" and types["blk.5.attn_q.weight"] == "Q4_K"
    assert (
        parse_header(llama3["Meta-Llama-3.1-8B-Instruct-Q4_0.gguf"].file.header)
        .get("tokenizer.ggml.tokens")
        .__len__()
        == 128_258
    )  # the sibling with two more tokens


def test_sibling_with_one_percent_of_tokens_changed() -> None:
    files = {f.path: f.blob for f in sibling_corpus().repos["sib/Llama-2-7B-Chat-GGUF"].files}
    edited, plain = files["llama-2-7b-chat-Q4_1.gguf"], files["llama-2-7b-chat-Q4_0.gguf"]
    a, b = (parse_header(x.file.header) for x in (edited, plain))
    ta, tb = a.get("tokenizer.ggml.tokens"), b.get("tokenizer.ggml.tokens")
    assert len(ta) == len(tb) == 32_000 and a.data_offset == b.data_offset
    changed = [i for i, (x, y) in enumerate(zip(ta, tb, strict=True)) if x != y]
    assert len(changed) == 320 and all(len(ta[i]) == len(tb[i]) for i in changed)
    assert {i * 4 // 32_000 for i in changed} == {0, 1, 2, 3}  # spread over the whole array


def test_split_projector_and_imatrix_beside_quants() -> None:
    corpus = sibling_corpus()
    qwen = [f.path for f in corpus.repos["sib/Qwen2.5-7B-Instruct-GGUF"].files]
    assert "qwen2.5-7b-instruct-F16-00002-of-00003.gguf" in qwen and "qwen2.5-7b-instruct-Q4_K_M.gguf" in qwen
    gemma = {f.path: f.blob for f in corpus.repos["sib/gemma-3-4b-it-GGUF"].files}
    imatrix = parse_header(gemma["gemma-3-4b-it-imatrix.gguf"].file.header)
    assert imatrix.get("general.type") == "imatrix" and "general.architecture" not in imatrix.fields
    assert parse_header(gemma["mmproj-gemma-3-4b-it-F16.gguf"].file.header).get("general.type") == "mmproj"
    mixed = {f.blob.spec.name for f in corpus.repos["sib/Llama-3.2-1B-3B-Instruct-GGUF"].files
             if isinstance(f.blob, SynthBlob)}  # fmt: skip
    assert mixed == {"Llama 3.2 1B Instruct", "Llama 3.2 3B Instruct"}


def test_multiquant_corpus_is_lazy() -> None:
    before = _synth.cache_info().misses
    corpus = multiquant_corpus(200)
    counts = [sum(f.path.endswith(".gguf") for f in r.files) for r in corpus]
    assert min(counts) >= 8 and max(counts) <= 24 and len(corpus) == 200
    assert _synth.cache_info().misses == before
