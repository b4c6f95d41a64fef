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


# Headers in flight at once, with room for a file's second read: a bench corpus of 3,000
# distinct multi-MB headers must not all stay in the fake hub's memory.
@functools.lru_cache(maxsize=128)
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
        header = self.file.header
        end = min(end, self.size)
        if start >= end:
            return b""
        head = header[start:end] if start < len(header) else b""
        return head + b"\0" * (end - start - len(head))


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
