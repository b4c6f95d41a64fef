"""What the fake hub serves: repos, their files, and where each file's bytes come from.

Three kinds of blob: a real file on disk (the sample models), a virtual synthetic GGUF
(header bytes built lazily and cached, then zeros up to the declared size) and small
in-memory text (README.md, config.json). Repos are cheap descriptions; no header is built
until a request needs its bytes, so a 1,000-repo corpus is created in milliseconds.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from registry.catalog.folding import ascii_lower
from tests.fakehub.synth import FILE_TYPES, ModelSpec, SynthFile, build


class Blob:
    """Bytes of one file, readable by range without materialising the whole file."""

    sha256: str
    lfs: bool = True
    _size: int | None = None

    @property
    def size(self) -> int:
        assert self._size is not None
        return self._size

    def read(self, start: int, end: int) -> bytes:  # end exclusive
        raise NotImplementedError


class LocalBlob(Blob):
    def __init__(self, path: Path, sha256: str | None = None) -> None:
        self.path = path
        self._size = path.stat().st_size
        # Hashing a 250 MB sample costs a second; a stable stand-in is enough for an LFS oid.
        self.sha256 = sha256 or hashlib.sha256(f"{path.name}:{self._size}".encode()).hexdigest()

    def read(self, start: int, end: int) -> bytes:
        with self.path.open("rb") as f:
            f.seek(start)
            return f.read(max(0, min(end, self.size) - start))


class BytesBlob(Blob):
    def __init__(self, data: bytes, *, lfs: bool = False) -> None:
        self.data = data
        self._size = len(data)
        self.sha256 = hashlib.sha256(data).hexdigest()
        self.lfs = lfs

    def read(self, start: int, end: int) -> bytes:
        return self.data[start:end]


# A built header keeps its own bytes (a few KiB of keys and tensor infos) and shares its
# vocabulary's: thousands fit in a few tens of MiB, and one evicted is rebuilt in about a
# millisecond.
@functools.lru_cache(maxsize=4096)
def _synth(spec: ModelSpec, shard: tuple[int, int] | None) -> SynthFile:
    return build(spec, shard=shard)


class SynthBlob(Blob):
    """A synthetic GGUF: real header bytes, then zeros to the declared size."""

    def __init__(self, spec: ModelSpec, shard: tuple[int, int] | None = None) -> None:
        self.spec = spec
        self.shard = shard
        self.sha256 = hashlib.sha256(repr((spec, shard)).encode()).hexdigest()

    @property
    def file(self) -> SynthFile:
        return _synth(self.spec, self.shard)

    @property
    def size(self) -> int:
        if self._size is None:
            self._size = self.file.size
        return self._size

    def read(self, start: int, end: int) -> bytes:
        return self.file.read(start, end)


@dataclass
class RepoFile:
    path: str
    blob: Blob


@dataclass
class Repo:
    repo_id: str
    files: list[RepoFile]
    sha: str = ""
    last_modified: str = "2025-01-01T00:00:00.000Z"
    created_at: str = "2024-06-01T00:00:00.000Z"
    downloads: int = 0
    likes: int = 0
    tags: list[str] = field(default_factory=list)
    gated: bool | str = False  # False, "auto" or "manual" like the hub
    private: bool = False
    card: dict[str, Any] = field(default_factory=dict)  # the README's YAML front matter

    def __post_init__(self) -> None:
        if not self.sha:
            self.sha = hashlib.sha1(self.repo_id.encode()).hexdigest()
        if "gguf" not in self.tags:
            self.tags = ["gguf", *self.tags]

    @property
    def author(self) -> str:
        return self.repo_id.split("/", 1)[0]

    def file(self, path: str) -> RepoFile | None:
        return next((f for f in self.files if f.path == path), None)


class Corpus:
    """An ordered set of repos; `blobs` finds a file by its LFS oid for the CDN.

    As on the hub, a repo id is found whatever its ASCII case (the repo answers with its
    own spelling), and a renamed repo's old id keeps pointing at it (`moved_to`)."""

    def __init__(self, repos: Iterable[Repo] = ()) -> None:
        self.repos: dict[str, Repo] = {}
        self._blobs: dict[str, Blob] = {}
        self._spelled: dict[str, str] = {}  # key -> id
        self._moved: dict[str, str] = {}  # old id's key -> the repo's id now
        for repo in repos:
            self.add(repo)

    def add(self, repo: Repo) -> Repo:
        self.repos[repo.repo_id] = repo
        self._spelled[ascii_lower(repo.repo_id)] = repo.repo_id
        for f in repo.files:
            self._blobs[f.blob.sha256] = f.blob
        return repo

    def blob(self, oid: str) -> Blob | None:
        return self._blobs.get(oid)

    def __iter__(self) -> Iterator[Repo]:
        return iter(self.repos.values())

    def __len__(self) -> int:
        return len(self.repos)

    def get(self, repo_id: str) -> Repo | None:
        """The repo spelled `repo_id` in any ASCII case (not following renames)."""
        repo = self.repos.get(repo_id)
        if repo is None:
            repo = self.repos.get(self._spelled.get(ascii_lower(repo_id), ""))
        return repo

    def rename(self, old: str, new: str) -> Repo:
        """Rename (or transfer, or respell) a repo: its files and history move with it."""
        repo = self.repos.pop(old)
        repo.repo_id = new
        self.add(repo)
        self._moved = {k: new if v == old else v for k, v in self._moved.items()}  # renamed again
        self._moved[ascii_lower(old)] = new
        return repo

    def moved_to(self, repo_id: str) -> str | None:
        """Where a renamed repo's old id points now, when no repo has that id any more."""
        new = self._moved.get(ascii_lower(repo_id))
        if new is None or self.get(repo_id) is not None or self.get(new) is None:
            return None
        return new


def card_readme(card: dict[str, Any]) -> BytesBlob:
    lines = ["---"]
    for key, value in card.items():
        lines.append(f"{key}: {json.dumps(value)}")
    lines += ["---", "", "A synthetic model card.", ""]
    return BytesBlob("\n".join(lines).encode())


def gguf_repo(
    repo_id: str,
    spec: ModelSpec,
    *,
    quants: Iterable[str] = ("Q4_K_M",),
    shards: int = 1,
    card: dict[str, Any] | None = None,
    tags: Iterable[str] = (),
    extra_files: Iterable[RepoFile] = (),
    **fields: Any,
) -> Repo:
    """A repo with one GGUF file per quant (split into `shards` when > 1) and a README."""
    stem = repo_id.split("/", 1)[1].removesuffix("-GGUF")
    files: list[RepoFile] = []
    for q in quants:
        s = replace(spec, quant=q)
        if shards > 1:
            for no in range(1, shards + 1):
                files.append(
                    RepoFile(f"{stem}-{q}-{no:05d}-of-{shards:05d}.gguf", SynthBlob(s, (no, shards)))
                )
        else:
            files.append(RepoFile(f"{stem}-{q}.gguf", SynthBlob(s)))
    card = dict(card or {})
    all_tags = list(tags)
    if card.get("license"):
        all_tags.append(f"license:{card['license']}")
    base = card.get("base_model")
    relation = card.get("base_model_relation", "quantized")
    for b in [base] if isinstance(base, str) else base or []:
        all_tags.append(f"base_model:{b}")
        all_tags.append(f"base_model:{relation}:{b}")
    files += [RepoFile("README.md", card_readme(card)), *extra_files]
    return Repo(repo_id, files, tags=all_tags, card=card, **fields)


def sample_corpus(*, real: bool = True) -> Corpus:
    """The test corpus: the two real sample models (when cached) and a varied synthetic set."""
    corpus = Corpus()
    if real:
        from tests.models import GEMMA3, SMOLLM2, unavailable_reason

        for model, repo_id, base, lic in (
            (
                SMOLLM2,
                "samples/SmolLM2-135M-Instruct-GGUF",
                "HuggingFaceTB/SmolLM2-135M-Instruct",
                "apache-2.0",
            ),
            (GEMMA3, "samples/gemma-3-270m-GGUF", "google/gemma-3-270m", "gemma"),
        ):
            if unavailable_reason(model) is None:
                card = {"license": lic, "base_model": [base], "base_model_relation": "quantized"}
                corpus.add(
                    Repo(
                        repo_id,
                        [
                            RepoFile(model.filename, LocalBlob(model.path, model.sha256)),
                            RepoFile("README.md", card_readme(card)),
                        ],
                        tags=[f"license:{lic}", f"base_model:quantized:{base}"],
                        card=card,
                        downloads=1000,
                        likes=10,
                    )
                )
    llama = ModelSpec(name="Tiny Llama", basename="tiny-llama", size_label="10M", license="llama3.1")
    corpus.add(
        gguf_repo(
            "synth/tiny-llama-GGUF",
            replace(llama, base_models=(("Tiny Llama", "Synth", "https://huggingface.co/synth/tiny-llama"),)),
            quants=("Q4_K_M", "Q8_0", "F16"),
            card={
                "license": "llama3.1",
                "base_model": "synth/tiny-llama",
                "base_model_relation": "quantized",
            },
            downloads=500,
            likes=3,
        )
    )
    corpus.add(
        gguf_repo(
            "synth/big-vocab-GGUF",
            ModelSpec(arch="gemma3", name="Big Vocab", vocab_size=262_144, tokenizer="gpt2", n_layers=4),
            card={"license": "gemma"},
            downloads=50,
        )
    )
    corpus.add(
        gguf_repo(
            "synth/split-moe-GGUF",
            ModelSpec(
                arch="qwen3moe", name="Split MoE", n_experts=8, n_layers=6, vocab_size=4096, tokenizer="gpt2"
            ),
            quants=("Q8_0",),
            shards=3,
            card={"license": "apache-2.0", "base_model": ["synth/moe-base"]},
        )
    )
    corpus.add(
        gguf_repo(
            "other/lora-adapter-GGUF",
            ModelSpec(kind="lora", name="Tiny LoRA"),
            quants=("F16",),
            card={"license": "mit", "base_model": "synth/tiny-llama", "base_model_relation": "adapter"},
        )
    )
    corpus.add(
        gguf_repo(
            "other/vision-GGUF",
            ModelSpec(arch="gemma3", name="Vision", vocab_size=2048),
            quants=("Q4_0",),
            extra_files=[
                RepoFile("mmproj-vision-F16.gguf", SynthBlob(ModelSpec(arch="clip", kind="mmproj")))
            ],
            card={
                "license": "gemma",
                "base_model": "google/gemma-3-4b-it",
                "base_model_relation": "finetune",
            },
            gated="manual",
        )
    )
    return corpus


_ARCHS = ("llama", "qwen2", "gemma3", "phi3", "mistral", "qwen3moe", "granite", "olmo2")
# Real vocabulary families: (tokens, tokenizer model, tokenizer.ggml.pre, merges or None for
# one per token): llama2/mistral SentencePiece, SmolLM BPE, llama3 BPE with its 280k merges,
# qwen2 BPE, gemma3 SentencePiece with 262k tokens (scores, no merges).
_VOCABS: tuple[tuple[int, str, str | None, int | None], ...] = (
    (32_000, "llama", None, None),
    (49_152, "gpt2", "smollm", None),
    (128_256, "gpt2", "llama-bpe", 280_147),
    (151_936, "gpt2", "qwen2", None),
    (262_144, "llama", "default", None),
)
_SMALL_VOCABS: tuple[tuple[int, str, str | None, int | None], ...] = (
    (1024, "llama", None, None),
    (2048, "gpt2", None, None),
)
_LICENSES = ("apache-2.0", "mit", "llama3.1", "gemma", "other", None)


def synthetic_corpus(
    n_repos: int, *, seed: int = 0, files_per_repo: int = 3, big_vocab: bool = False
) -> Corpus:
    """`n_repos` varied repos for benches. Headers are shared by spec and built on demand.

    Small vocabularies by default keep the bench measuring the crawler, not header
    generation; `big_vocab` mixes in the real vocabulary families, 32k to 262k tokens.
    """
    rng = random.Random(seed)
    corpus = Corpus()
    quant_names = list(FILE_TYPES)
    vocabs = _VOCABS if big_vocab else _SMALL_VOCABS
    for i in range(n_repos):
        arch = rng.choice(_ARCHS)
        size, tok, pre, merges = rng.choice(vocabs)
        org = f"org{i % 37}"
        base = f"base{i % 53}/{arch}-{i % 11}b"
        # Real-world shapes (GB-sized files) so a first window never swallows a whole file.
        n_embd, n_layers = rng.choice(((2048, 16), (3072, 28), (4096, 32)))
        spec = ModelSpec(
            arch=arch,
            n_embd=n_embd,
            n_ff=n_embd * 3,
            n_layers=n_layers,
            n_head=n_embd // 128,
            n_head_kv=8,
            name=f"{arch.title()} {i % 11}B",
            basename=f"{arch}-{i % 11}b",
            size_label=f"{i % 11 + 1}B",
            vocab_size=size,
            tokenizer=tok,
            pre=pre,
            merges=merges,
            n_experts=8 if arch.endswith("moe") else 0,
            base_models=((f"{arch}-{i % 11}b", base.split("/")[0], f"https://huggingface.co/{base}"),),
        )
        lic = rng.choice(_LICENSES)
        card: dict[str, Any] = {"base_model": base, "base_model_relation": "quantized"}
        if lic:
            card["license"] = lic
        corpus.add(
            gguf_repo(
                f"{org}/{arch}-{i}-GGUF",
                spec,
                quants=rng.sample(quant_names, files_per_repo),
                card=card,
                downloads=rng.randrange(100_000),
                likes=rng.randrange(1000),
                last_modified=f"2025-{1 + i % 12:02d}-{1 + i % 28:02d}T00:00:00.000Z",
            )
        )
    return corpus


def header_corpus(*, real: bool = True) -> Corpus:
    """Realistic headers for the fetch-cost bench: the two sample models, a llama3-style
    128k vocabulary with 280k merges, a qwen2-style 152k one, a projector, a LoRA adapter and
    a 4-shard split model (shards 2..4 carry tensor infos only)."""
    corpus = sample_corpus(real=real)
    for repo_id in [r.repo_id for r in corpus if not r.repo_id.startswith("samples/")]:
        del corpus.repos[repo_id]
    llama3 = ModelSpec(arch="llama", name="Llama 3.1 8B Instruct", size_label="8B", n_layers=32, n_embd=4096,
                       n_ff=14336, n_head=32, n_head_kv=8, vocab_size=128_256, tokenizer="gpt2",
                       pre="llama-bpe", merges=280_147, context_length=131_072)  # fmt: skip
    qwen2 = ModelSpec(arch="qwen2", name="Qwen2.5 7B Instruct", size_label="7B", n_layers=28, n_embd=3584,
                      n_ff=18944, n_head=28, n_head_kv=4, vocab_size=151_936, tokenizer="gpt2", pre="qwen2",
                      merges=151_387, context_length=32_768)  # fmt: skip
    corpus.add(gguf_repo("bench/Llama-3.1-8B-Instruct-GGUF", llama3))
    corpus.add(gguf_repo("bench/Qwen2.5-7B-Instruct-GGUF", qwen2))
    projector = ModelSpec(arch="clip", kind="mmproj", name="SigLIP", n_embd=1152, n_layers=27)
    corpus.add(Repo("bench/vision-mmproj-GGUF", [RepoFile("mmproj-model-f16.gguf", SynthBlob(projector))]))
    lora = ModelSpec(kind="lora", name="Llama 3 8B Adapter", n_layers=32, n_embd=4096)
    corpus.add(Repo("bench/adapter-GGUF", [RepoFile("Llama-3-8B-Adapter-F16-LoRA.gguf", SynthBlob(lora))]))
    big = replace(llama3, name="Llama 3.1 70B Instruct", size_label="70B", n_layers=80, n_embd=8192,
                  n_ff=28672, n_head=64)  # fmt: skip
    corpus.add(gguf_repo("bench/Llama-3.1-70B-Instruct-GGUF", big, quants=("Q4_K_M",), shards=4))
    return corpus


# -- multi-quant repos: the shapes sibling reuse meets on the hub ------------------------------

# Quants without an importance matrix whatever the repo does: llama-quantize uses none for them.
_NO_IMATRIX = {"F16", "BF16", "Q8_0", "Q6_K", "Q5_0", "Q5_1", "Q4_0", "Q4_1"}
# A quantizer's usual ladder, small to large; a repo takes a subset in this order.
LADDER = ("IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "Q2_K_S", "Q2_K", "IQ3_XXS", "IQ3_XS",
          "IQ3_S", "Q3_K_S", "IQ3_M", "Q3_K_M", "Q3_K_L", "IQ4_XS", "IQ4_NL", "Q4_0", "Q4_1", "Q4_K_S",
          "Q4_K_M", "Q5_0", "Q5_1", "Q5_K_S", "Q5_K_M", "Q6_K", "Q8_0", "F16", "BF16")  # fmt: skip


def quant_file(stem: str, spec: ModelSpec, quant: str, *, imatrix: bool = False) -> RepoFile:
    """One quant of a model as llama-quantize writes it, named `{stem}-{quant}.gguf`."""
    s = replace(spec, quant=quant, quantized=True, imatrix=imatrix and quant not in _NO_IMATRIX)
    return RepoFile(f"{stem}-{quant}.gguf", SynthBlob(s))


def split_files(stem: str, spec: ModelSpec, quant: str, shards: int) -> list[RepoFile]:
    s = replace(spec, quant=quant, quantized=True)
    return [RepoFile(f"{stem}-{quant}-{no:05d}-of-{shards:05d}.gguf", SynthBlob(s, (no, shards)))
            for no in range(1, shards + 1)]  # fmt: skip


def multiquant_repo(
    repo_id: str,
    models: Iterable[tuple[str, ModelSpec, Iterable[str]]],
    *,
    imatrix: bool = False,
    extra_files: Iterable[RepoFile] = (),
    card: dict[str, Any] | None = None,
    **fields: Any,
) -> Repo:
    """A repo of quants: for each (file stem, spec, quants) one file per quant, then extras."""
    files = [quant_file(stem, spec, q, imatrix=imatrix) for stem, spec, quants in models for q in quants]
    card = dict(card or {"license": "apache-2.0"})
    files += [*extra_files, RepoFile("README.md", card_readme(card))]
    return Repo(repo_id, files, card=card, tags=[f"license:{card['license']}"], **fields)


def _spec(name: str, basename: str, size: str, arch: str, vocab_family: int, **shape: Any) -> ModelSpec:
    tokens, tok, pre, merges = next(v for v in _VOCABS if v[0] == vocab_family)
    return ModelSpec(arch=arch, name=name, basename=basename, size_label=size, vocab_size=tokens,
                     tokenizer=tok, pre=pre, merges=merges, **shape)  # fmt: skip


def sibling_corpus() -> Corpus:
    """Multi-quant repos shaped like the hub's, for the sibling-reuse bench and tests.

    Every vocabulary family (32k SentencePiece, 49k and 152k BPE, 128k BPE with 280k merges,
    262k SentencePiece) in repos of 8 to 24 quants, tensor types per file type as
    llama-quantize writes them, with and without `quantize.imatrix.*` keys. Among them: a
    quant whose vocabulary has 1% of its tokens changed in place (same count, same byte
    length), one whose vocabulary has two more tokens, a repo mixing two models that share a
    vocabulary, a split quant among single files, a projector and imatrix files beside quants.
    """
    corpus = Corpus()
    llama2 = _spec("Llama 2 7B Chat", "Llama-2", "7B", "llama", 32_000, n_layers=32, n_embd=4096, n_ff=11008,
                   n_head=32, n_head_kv=32, context_length=4096)  # fmt: skip
    quants = ("Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_0", "Q4_K_S", "Q4_K_M", "Q5_0", "Q5_K_S", "Q5_K_M",
              "Q6_K", "Q8_0")  # fmt: skip
    repo = multiquant_repo("sib/Llama-2-7B-Chat-GGUF", [("llama-2-7b-chat", llama2, quants)],
                           card={"license": "llama2"})  # fmt: skip
    # A quant re-uploaded after a tokenizer fix: 1% of its tokens differ, lengths all equal.
    edited = quant_file("llama-2-7b-chat", replace(llama2, vocab_edit=45), "Q4_1")
    repo.files.insert(len(quants), edited)
    corpus.add(repo)

    smol = _spec("SmolLM2 1.7B Instruct", "SmolLM2", "1.7B", "llama", 49_152, n_layers=24, n_embd=2048,
                 n_ff=8192, n_head=32, n_head_kv=32, context_length=8192)  # fmt: skip
    imatrix = RepoFile("SmolLM2-1.7B-Instruct-imatrix.gguf", SynthBlob(ModelSpec(kind="imatrix", n_layers=24,
                       n_embd=2048, n_ff=8192)))  # fmt: skip
    corpus.add(multiquant_repo(
        "sib/SmolLM2-1.7B-Instruct-GGUF",
        [("SmolLM2-1.7B-Instruct", smol, ("IQ2_M", "IQ3_M", "Q3_K_L", "IQ4_XS", "Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0"))],
        imatrix=True, extra_files=[imatrix],
    ))  # fmt: skip

    llama3 = _spec("Meta Llama 3.1 8B Instruct", "Meta-Llama-3.1", "8B", "llama", 128_256, n_layers=32,
                   n_embd=4096, n_ff=14336, n_head=32, n_head_kv=8, context_length=131_072)  # fmt: skip
    ladder = [q for q in LADDER if q not in ("Q4_1", "Q5_1", "BF16", "IQ1_M", "Q2_K_S")]
    repo = multiquant_repo("sib/Meta-Llama-3.1-8B-Instruct-GGUF",
                           [("Meta-Llama-3.1-8B-Instruct", llama3, ladder)], imatrix=True,
                           card={"license": "llama3.1"})  # fmt: skip
    assert len(ladder) == 24
    # One quant made from a checkpoint with two added tokens: another vocabulary length.
    added = replace(llama3, vocab_size=128_258)
    repo.files[ladder.index("Q4_0")] = quant_file("Meta-Llama-3.1-8B-Instruct", added, "Q4_0", imatrix=True)
    corpus.add(repo)

    qwen = _spec("Qwen2.5 7B Instruct", "Qwen2.5", "7B", "qwen2", 151_936, n_layers=28, n_embd=3584,
                 n_ff=18944, n_head=28, n_head_kv=4, context_length=32_768)  # fmt: skip
    singles = ("Q2_K", "Q3_K_M", "IQ3_M", "Q4_0", "IQ4_XS", "Q4_K_S", "Q4_K_M", "Q5_0", "Q5_K_S", "Q5_K_M",
               "Q6_K", "IQ2_M", "IQ3_XS", "Q3_K_L")  # fmt: skip
    repo = multiquant_repo("sib/Qwen2.5-7B-Instruct-GGUF", [("qwen2.5-7b-instruct", qwen, singles)],
                           imatrix=True, extra_files=[*split_files("qwen2.5-7b-instruct", qwen, "Q8_0", 2),
                                                      *split_files("qwen2.5-7b-instruct", qwen, "F16", 3)])  # fmt: skip
    corpus.add(repo)

    gemma = _spec("Gemma 3 4b It", "gemma-3", "4B", "gemma3", 262_144, n_layers=34, n_embd=2560, n_ff=10240,
                  n_head=8, n_head_kv=4, context_length=131_072)  # fmt: skip
    projector = ModelSpec(arch="clip", kind="mmproj", name="SigLIP", n_embd=1152, n_layers=27)
    imatrix = RepoFile("gemma-3-4b-it-imatrix.gguf", SynthBlob(ModelSpec(kind="imatrix", n_layers=34, n_embd=2560,
                       n_ff=10240)))  # fmt: skip
    corpus.add(multiquant_repo(
        "sib/gemma-3-4b-it-GGUF",
        [("gemma-3-4b-it", gemma, ("IQ2_M", "Q2_K", "IQ3_M", "Q3_K_M", "IQ4_XS", "Q4_0", "Q4_K_M", "Q5_K_M",
                                   "Q6_K", "Q8_0"))],
        imatrix=True, card={"license": "gemma"},
        extra_files=[RepoFile("mmproj-gemma-3-4b-it-F16.gguf", SynthBlob(projector)), imatrix],
    ))  # fmt: skip

    small = _spec("Llama 3.2 1B Instruct", "Llama-3.2", "1B", "llama", 128_256, n_layers=16, n_embd=2048,
                  n_ff=8192, n_head=32, n_head_kv=8, context_length=131_072)  # fmt: skip
    mid = replace(small, name="Llama 3.2 3B Instruct", size_label="3B", n_layers=28, n_embd=3072, n_head=24)
    six = ("Q3_K_L", "IQ4_XS", "Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0")
    corpus.add(multiquant_repo("sib/Llama-3.2-1B-3B-Instruct-GGUF",
                               [("Llama-3.2-1B-Instruct", small, six), ("Llama-3.2-3B-Instruct", mid, six)],
                               imatrix=True, card={"license": "llama3.2"}))  # fmt: skip
    return corpus


def multiquant_corpus(n_repos: int, *, seed: int = 0) -> Corpus:
    """`n_repos` repos of 8 to 24 quants of one model each, for the crawl-throughput bench.

    The real vocabulary families (32k to 262k tokens) and shapes of 1 to 8B models; half the
    repos carry imatrix keys in their K and IQ quants. Built lazily like `synthetic_corpus`.
    """
    rng = random.Random(seed)
    corpus = Corpus()
    for i in range(n_repos):
        arch = rng.choice(("llama", "qwen2", "gemma3", "mistral", "granite", "olmo2"))
        size, tok, pre, merges = rng.choice(_VOCABS)
        n_embd, n_layers = rng.choice(((2048, 16), (3072, 28), (4096, 32)))
        spec = ModelSpec(arch=arch, name=f"{arch.title()} {i % 11}B", basename=f"{arch}-{i % 11}b",
                         size_label=f"{i % 11 + 1}B", vocab_size=size, tokenizer=tok, pre=pre, merges=merges,
                         n_embd=n_embd, n_ff=n_embd * 3, n_layers=n_layers, n_head=n_embd // 128, n_head_kv=8)  # fmt: skip
        picked = sorted(rng.sample(range(len(LADDER)), rng.randint(8, 24)))
        repo = multiquant_repo(
            f"mq{i % 37}/{arch}-{i}-GGUF",
            [(f"{arch}-{i}", spec, [LADDER[k] for k in picked])],
            imatrix=rng.random() < 0.5,
            card={"license": rng.choice(("apache-2.0", "mit", "llama3.1", "gemma")),
                  "base_model": f"base{i % 53}/{arch}-{i % 11}b", "base_model_relation": "quantized"},
            downloads=rng.randrange(100_000),
            last_modified=f"2025-{1 + i % 12:02d}-{1 + i % 28:02d}T00:00:00.000Z",
        )  # fmt: skip
        corpus.add(repo)
    return corpus
