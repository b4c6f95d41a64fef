"""A plain-Python model of the catalog search, for differential tests.

Random catalogs are described by `CatalogSpec` (repos, artifacts, lineage, later writes and
verification results), written through the catalog's own writer, and searched both by
`registry.catalog.search` and by `Oracle`, which applies the documented semantics to the
same data with nothing but Python: every filter, the free text (each word a case-insensitive
substring of the repo id, path, tags, name, basename, fine-tune, description), lineage
(repos below a repo id through the edges, at most MAX_DEPTH steps), the sorts with their
tie-break on the artifact id (in the sort's direction), and the facet counts.

Architecture, license, file type and size label are written in several ASCII cases and
queried in any case: they match when equal ignoring ASCII case only (`Ü` and `ü` stay
apart), and hits and facets show each in one spelling (`SPELLINGS`), which the oracle
spells itself rather than asking `registry.catalog.folding`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
from collections import Counter
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec
from hypothesis import strategies as st
from sqlalchemy import select, update

from registry.catalog.caches import Hints
from registry.catalog.db import Database
from registry.catalog.lineage import MAX_DEPTH
from registry.catalog.models import VERIFICATION_STATUSES, Artifact, Repo
from registry.catalog.search import (
    FACETS,
    MEMORY_CONTEXT,
    SORT_ALIASES,
    SORTS,
    STATUSES,
    PlannerSettings,
    SearchQuery,
)
from registry.catalog.search.memory import BASIS_BEFORE
from registry.catalog.services import upsert_repo_snapshot
from registry.catalog.snapshot import ArtifactRecord, RepoSnapshot
from registry.gguf.compat import BY_CODE
from registry.gguf.compat import finding as compat_finding
from registry.gguf.facts_model import KINDS, MODALITIES, BaseModel, QuantMixEntry
from registry.gguf.kvcache import KVCache
from registry.responses import ArtifactSummary
from registry.safety.capabilities import CAPABILITIES
from registry.safety.findings import SEVERITIES, Finding
from tests.catalog.factories import artifact, error_artifact, make_facts

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
HIT_FIELDS = {"verification": "verification_status"}  # a facet's name -> the hit's field, where they differ
# Repo ids: few, so that lineage edges meet; non-ASCII and upper case in some. GHOST is
# only ever named as a parent (an edge may point at a repo not in the catalog).
REPO_IDS = ("meta/Base", "org/tune-GGUF", "bart/quant-GGUF", "ünï/mödel-GGUF", "z/x", "org/mix")
GHOST = "ghost/none"
def repo_key(repo_id: str) -> str:
    """A repo's identity: its id with the letters A-Z in lower case."""
    return _ascii_lower(repo_id)


# How lineage sources and queries may spell them: ASCII case changed (the same repo), and
# non-ASCII letters upper-cased (another repo: only A-Z fold).
REPO_SPELLINGS = (*REPO_IDS, GHOST, "META/base", "Org/Tune-gguf", "BART/QUANT-gguf", "ÜNÏ/MÖDEL-gguf", "Z/X", "Ghost/None")
# The values of the case-insensitive filters: one value in several spellings, as files write them.
ARCHITECTURES = ("llama", "LLaMA", "qwen2", "Qwen2", "gemma3", None)
FILE_TYPES = ("Q4_K_M", "q4_k_m", "Q8_0", "F16", "IQ2_XS", "iq2_xs", None)
TENSOR_TYPES = ("Q4_K", "Q6_K", "F32", "IQ2_XS", "BF16")
LICENSES = ("mit", "MIT", "apache-2.0", "Apache-2.0", "llama3", "Ünï-1.0", "ünï-1.0", None)
PARAMS = (0, 500_000_000, 1_500_000_000, 8_000_000_000, 46_700_000_000, 100_000_000_000)
CONTEXTS = (None, 2048, 8192, 32768)
SIZE_LABELS = ("1B", "8B", "8b", "8x7B", "8X7b", "30b-a3b", None)
EXPERTS = (None, 2, 8)
DOWNLOADS = (0, 10, 10, 1000)  # ties on purpose
LIKES = (0, 1, 1, 5)
WHEN = (None, datetime(2024, 5, 1, tzinfo=UTC), datetime(2024, 5, 1, 0, 0, 1, 500, tzinfo=UTC))
SIZES = (5, 7, 1000)
# KV cache estimates: bytes per token (one a TiB, to check no sum overflows), sliding-window
# bytes per token and the window (None: the whole context).
KV_BYTES = (0, 1, 1, 2, 1 << 40)
KV_SWA_BYTES = (0, 0, 1)
KV_WINDOWS = (None, 512, 4096)
# Vocabulary keys and token counts: 128 apart and 129 apart from 32,000 among them.
VOCAB_KEYS = ("a" * 64, "b" * 64)
VOCAB_SIZES = (32_000, 32_000, 32_128, 32_129, 31_872, 31_871)
RELATIONS = ("quantized", "finetune", "adapter", "merge", "unknown", "Fine-Tune", None)
# Words of names, tags and descriptions: short ones (no index), LIKE wildcards, backslashes,
# quotes, and letters whose case folding differs between Python and other engines.
WORDS = (
    "llama", "Instruct", "8B", "7b", "q4", "x", "é", "ÜNÏ", "日本語", "mixture", "tiny", "100%", "a_b",
    "ß", "İx", "back\\slash", "quote\"s", "GGUF", "gguf", "Ωmega", "ǅab", "ﬁne",
)  # fmt: skip
# Query terms: the words and pieces of them and of the repo ids and paths.
TERMS = (*WORDS, "lla", "ama", "8", "b", "_", "%", "ünï", "mö", "/", "-", "e", "gg", "σ", "ς", "όγος", "όγοσ",
         "st", "sty", "ſty", "style", "ss", "i̇x", "fine", "ǆab", "ωmega", "\\", "\"", "org/", "q4_k", ".gguf",
         "instruct 8b", "日本")  # fmt: skip
# Words holding letters that one case folding or another takes for the same: drawn as often
# as all the others together.
FOLDING_WORDS = ("ΛΌΓΟΣ", "λόγοσ", "ſtyle", "style", "ǅab", "straße", "\u212aelvin")
PATH_WORDS = ("model", "Tiny", "ünï", "q4_k_m", "x", "a%b")


def _ascii_lower(value: str) -> str:
    return "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in value)


def _ascii_upper(value: str) -> str:
    return "".join(chr(ord(c) - 32) if "a" <= c <= "z" else c for c in value)


def _size_spelling(value: str) -> str:
    """Upper case, but for the `x` between an expert count and a size: 8x7B."""
    up = _ascii_upper(value)
    digits = "0123456789"
    return "".join(
        "x" if c == "X" and 0 < i < len(up) - 1 and up[i - 1] in digits and up[i + 1] in digits else c
        for i, c in enumerate(up)
    )


# How hits and facets spell the values of the case-insensitive filters.
SPELLINGS = {"architecture": _ascii_lower, "license": _ascii_lower, "file_type": _ascii_upper,
             "size_label": _size_spelling}  # fmt: skip


def _spelled(name: str, value: str | None) -> str | None:
    return None if value is None else SPELLINGS[name](value)


def _same(stored: str | None, wanted: str) -> bool:
    return stored is not None and _ascii_lower(stored) == _ascii_lower(wanted)


# llama.cpp finding codes the generated artifacts carry: one refusal (error) and two warnings.
COMPAT_CODES = ("L003", "L013", "L017")

@dataclass(frozen=True)
class ArtifactSpec:
    path: str
    error: bool
    architecture: str | None = None
    file_type: str | None = None
    tensor_types: tuple[str, ...] = ()
    license: str | None = None
    parameter_count: int = 0
    context_length: int | None = None
    size_label: str | None = None
    expert_count: int | None = None
    name: str | None = None
    basename: str | None = None
    finetune: str | None = None
    tags: tuple[str, ...] = ()
    description: str | None = None
    findings: tuple[str, ...] | None = None  # severities; None: not scanned
    base_models: tuple[str, ...] = ()  # general.base_model.*.repo_id
    shards: int = 1
    size: int = 5
    verification: str | None = None
    # KV cache estimate: (bytes per token, sliding-window bytes per token, window); None: none
    kv: tuple[int, int, int | None] | None = None
    vocab: tuple[str, int] | None = None  # (vocabulary key, token count); None: no key
    capabilities: frozenset[str] | None = None  # of the chat templates; None: not probed
    kind: str = "model"
    modalities: frozenset[str] = frozenset()  # a projector's inputs; ignored on other kinds
    compat: tuple[str, ...] | None = None  # llama.cpp finding codes; None: not checked

    def record(self) -> ArtifactRecord:
        if self.error:
            return error_artifact(self.path, "bad_magic", "not a GGUF file")
        facts = make_facts(
            architecture=self.architecture, file_type=self.file_type, license=self.license,
            parameter_count=self.parameter_count, context_length=self.context_length,
            size_label=self.size_label, expert_count=self.expert_count, name=self.name,
            basename=self.basename, finetune=self.finetune, tags=self.tags, description=self.description,
            quant_mix={t: QuantMixEntry(1, 10, 10) for t in self.tensor_types},
            base_models=tuple(BaseModel(repo_id=r) for r in self.base_models),
            kv_cache=None if self.kv is None else KVCache(
                layers=1, bytes_per_token=self.kv[0], swa_layers=1 if self.kv[1] else 0,
                swa_bytes_per_token=self.kv[1], sliding_window=self.kv[2],
            ),
            vocab_sha256=None if self.vocab is None else self.vocab[0],
            vocab_size=None if self.vocab is None else self.vocab[1], kind=self.kind,
            modalities={m: None for m in self.modalities} if self.kind == "mmproj" else {},
        )  # fmt: skip
        record = artifact(self.path, facts, size=self.size, shards=self.shards)
        findings = None
        if self.findings is not None:
            findings = tuple(Finding(f"finding-{i}", s, "m", "e") for i, s in enumerate(self.findings))  # type: ignore[arg-type]
        compat = None if self.compat is None else tuple(compat_finding(c, "f", "m") for c in self.compat)
        return dataclasses.replace(
            record, chat_template_findings=findings, chat_template_capabilities=self.capabilities,
            llama_cpp_findings=compat,
        )

    @property
    def stored_path(self) -> str:
        """The path of the artifact's first shard, as the writer names split models."""
        return (
            self.path
            if self.shards == 1
            else f"{self.path.removesuffix('.gguf')}-00001-of-{self.shards:05d}.gguf"
        )


@dataclass(frozen=True)
class RepoSpec:
    repo_id: str
    artifacts: tuple[ArtifactSpec, ...]
    downloads: int = 0
    likes: int = 0
    last_modified: datetime | None = None
    card_license: str | None = None
    tags: tuple[str, ...] = ()
    description: str | None = None
    card_base_model: tuple[str, ...] = ()
    relation: str | None = None
    # A later write: "drop" a new revision without the first artifact (it becomes gone);
    # "counters" the same revision with new downloads, likes, date and card license.
    later: str | None = None
    later_downloads: int = 0
    later_likes: int = 0
    later_last_modified: datetime | None = None
    later_card_license: str | None = None

    def snapshot(self, revision: str = "rev1", **overrides: Any) -> RepoSnapshot:
        values: dict[str, Any] = {
            "artifacts": tuple(a.record() for a in self.artifacts), "last_modified": self.last_modified,
            "downloads": self.downloads, "likes": self.likes, "tags": self.tags,
            "card_license": self.card_license, "description": self.description,
            "card_base_model": self.card_base_model, "card_base_model_relation": self.relation,
        }  # fmt: skip
        values.update(overrides)
        return RepoSnapshot(repo_id=self.repo_id, revision=revision, **values)

    def writes(self) -> list[RepoSnapshot]:
        first = self.snapshot()
        if self.later == "drop":
            return [first, self.snapshot("rev2", artifacts=first.artifacts[1:])]
        if self.later == "counters":
            return [first, self.snapshot(
                downloads=self.later_downloads, likes=self.later_likes,
                last_modified=self.later_last_modified, card_license=self.later_card_license,
            )]  # fmt: skip
        return [first]


@dataclass(frozen=True)
class CatalogSpec:
    repos: tuple[RepoSpec, ...]


@dataclass
class Row:
    """One artifact as the oracle knows it, and the hit the search must return for it."""

    item: dict[str, Any]
    repo_id: str
    sort_name: str
    haystack: str
    tensor_types: frozenset[str]
    severity: int | None
    size_bucket: str | None
    kv: tuple[int, int, int | None] | None = None
    vocab: tuple[str, int] | None = None
    capabilities: frozenset[str] | None = None
    modalities: frozenset[str] | None = None  # of an indexed projector; None: not one
    compat: tuple[str, ...] | None = None  # llama.cpp finding codes; None: not checked

    def memory_item(self, context: int | None) -> dict[str, Any] | None:
        """The hit's `memory`: the file plus its KV cache at `context` tokens (MEMORY_CONTEXT
        when None), or at the model's own context length when shorter; None without an estimate."""
        if self.kv is None:
            return None
        bytes_per_token, swa_bytes_per_token, window = self.kv
        tokens = MEMORY_CONTEXT if context is None else context
        own = self.item["context_length"]
        if own is not None and 0 < own < tokens:
            tokens = own
        in_window = tokens if window is None else min(tokens, window)
        size = int(self.item["file_size"]) + bytes_per_token * tokens + swa_bytes_per_token * in_window
        # Rows without a memory profile (make_facts has none) are sized as an older release's.
        return {"tokens": tokens, "bytes": size, "basis": BASIS_BEFORE}

    def memory_double(self, context: int | None) -> float:
        """The memory in double precision, added up as the catalog's SQL does (the order of a
        sort by memory): rounded above 2**53 bytes, where rows of different sizes can tie."""
        item = self.memory_item(context)
        assert item is not None and self.kv is not None
        bytes_per_token, swa_bytes_per_token, window = self.kv
        tokens = item["tokens"]
        in_window = tokens if window is None else min(tokens, window)
        size = float(self.item["file_size"])
        return size + float(bytes_per_token) * float(tokens) + float(swa_bytes_per_token) * float(in_window)

    def memory(self, context: int | None) -> int | None:
        item = self.memory_item(context)
        return None if item is None else item["bytes"]


@dataclass
class Oracle:
    rows: list[Row]
    # parent -> children, as repo keys: a repo id names the same repo in any ASCII case
    edges: dict[str, set[str]] = field(default_factory=dict)

    def descendants(self, repo_id: str) -> set[str]:
        """Keys of the repos reachable downwards in at most MAX_DEPTH steps (the start only
        through a cycle)."""
        found: set[str] = set()
        frontier = {repo_key(repo_id)}
        for _ in range(MAX_DEPTH):
            frontier = {c for p in frontier for c in self.edges.get(p, ())} - found
            if not frontier:
                break
            found |= frontier
        return found

    def bind(self, q: SearchQuery) -> SearchQuery:
        """The query with `draft_for`, drawn as a row's index, naming that row's artifact id."""
        if q.draft_for is None or not self.rows:
            return dataclasses.replace(q, draft_for=None)
        return dataclasses.replace(q, draft_for=self.rows[q.draft_for % len(self.rows)].item["id"])

    def can_draft(self, row: Row, target_id: int) -> bool:
        """The same key, at most 128 tokens apart, and between 1 and the target's parameters."""
        [target] = [r for r in self.rows if r.item["id"] == target_id]
        if target.vocab is None or row.vocab is None:
            return False
        return (
            row.vocab[0] == target.vocab[0] and abs(row.vocab[1] - target.vocab[1]) <= 128
            and 0 < row.item["parameter_count"] < target.item["parameter_count"]
        )  # fmt: skip

    def matches(self, q: SearchQuery) -> list[Row]:
        family = self.descendants(q.descendant_of) if q.descendant_of is not None else None
        terms = q.text.lower().split() if q.text else []
        severity = SEVERITIES.index(q.template_severity) if q.template_severity is not None else None
        wanted = {c.strip() for c in q.capability.split(",")} if q.capability is not None else None
        codes = {c.strip() for c in q.finding.split(",")} if q.finding is not None else None
        projector_repos = {
            repo_key(r.repo_id) for r in self.rows if r.item["status"] == "indexed" and r.item["kind"] == "mmproj"
        }
        inputs = {c.strip() for c in q.modality.split(",")} if q.modality is not None else None
        taking = {  # the repos with an indexed projector that takes all of `inputs`
            repo_key(r.repo_id) for r in self.rows
            if r.item["status"] == "indexed" and r.modalities is not None and inputs is not None
            and inputs <= r.modalities
        }  # fmt: skip
        out = []
        for row in self.rows:
            i = row.item
            memory = row.memory(q.memory_context) if q.max_memory is not None else None
            checks = (
                q.status == "all" or i["status"] == q.status,
                q.author is None or repo_key(row.repo_id).split("/")[0] == _ascii_lower(q.author),
                q.repo is None or repo_key(row.repo_id) == repo_key(q.repo),
                q.architecture is None or _same(i["architecture"], q.architecture),
                q.license is None or _same(i["license"], q.license),
                q.file_type is None or _same(i["file_type"], q.file_type),
                q.size_label is None or _same(i["size_label"], q.size_label),
                q.expert_count is None or i["expert_count"] == q.expert_count,
                q.verification is None or i["verification_status"] == q.verification,
                q.tensor_type is None or q.tensor_type.upper() in row.tensor_types,
                q.min_params is None or i["parameter_count"] >= q.min_params,
                q.max_params is None or i["parameter_count"] <= q.max_params,
                q.min_size is None or i["file_size"] >= q.min_size,
                q.max_size is None or i["file_size"] <= q.max_size,
                q.min_context is None
                or (i["context_length"] is not None and i["context_length"] >= q.min_context),
                severity is None or (row.severity is not None and row.severity >= severity),
                wanted is None or (row.capabilities is not None and wanted <= row.capabilities),
                codes is None or (row.compat is not None and codes <= set(row.compat)),
                q.runs_in is None or (row.compat is not None and not any(BY_CODE[c].severity == "error"
                                                                          for c in row.compat)),
                q.kind is None or i["kind"] == q.kind,
                q.with_projector is None or (repo_key(row.repo_id) in projector_repos) == q.with_projector,
                inputs is None or repo_key(row.repo_id) in taking,
                family is None or repo_key(row.repo_id) in family,
                q.max_memory is None or (memory is not None and memory <= q.max_memory),
                q.draft_for is None or self.can_draft(row, q.draft_for),
                all(t in row.haystack for t in terms),
            )
            if all(checks):
                out.append(row)
        return out

    def search(self, q: SearchQuery) -> list[dict[str, Any]]:
        """Every match in order: the sort key, then the id, both in the sort's direction."""
        key, _, direction = q.sort.partition(":")
        key = SORT_ALIASES.get(key, key)
        descending = SORTS[key][1] if not direction else direction == "desc"

        def sort_key(row: Row) -> tuple[Any, int]:
            if key == "memory":
                value = row.memory_double(q.memory_context)
            else:
                value = row.sort_name if key == "name" else row.item[key]
            return value, row.item["id"]

        ranked, last = [], []  # by memory: the rows without an estimate last, in either direction, by id
        for r in self.matches(q):
            (last if key == "memory" and r.kv is None else ranked).append(r)
        ordered = sorted(ranked, key=sort_key, reverse=descending)
        ordered += sorted(last, key=lambda r: int(r.item["id"]), reverse=descending)
        return [{**r.item, "memory": r.memory_item(q.memory_context)} for r in ordered]

    def facets(self, q: SearchQuery, names: Sequence[str] = FACETS) -> dict[str, list[tuple[str, int]]]:
        """Counts per facet value (None as "unknown"), most first, then by value; an
        artifact under each capability it has, and under none when it has none."""
        matched = self.matches(q)
        out = {}
        for name in names:
            values: Counter[str] = Counter()
            for r in matched:
                if name == "capability":
                    values.update(r.capabilities or ())
                elif name == "size_bucket":
                    values[r.size_bucket or "unknown"] += 1
                else:
                    values[r.item[HIT_FIELDS.get(name, name)] or "unknown"] += 1
            out[name] = sorted(values.items(), key=lambda kv: (-kv[1], kv[0]))
        return out


BUCKETS = ((1_500_000_000, "<1.5B"), (4_000_000_000, "1.5-4B"), (9_000_000_000, "4-9B"),
           (15_000_000_000, "9-15B"), (35_000_000_000, "15-35B"), (80_000_000_000, "35-80B"))  # fmt: skip


def _bucket(params: int) -> str | None:
    if params <= 0:
        return None
    return next((label for limit, label in BUCKETS if params < limit), ">80B")


def _edges(repo: RepoSpec, artifacts: tuple[ArtifactSpec, ...]) -> set[str]:
    """The parents' keys of a repo's last complete snapshot: card, hub tags, GGUF keys; never
    itself, in any case."""
    parents = set(repo.card_base_model)
    parents |= {t.rpartition(":")[2] for t in repo.tags if t.startswith("base_model:")}
    parents |= {b for a in artifacts if not a.error for b in a.base_models}
    return {repo_key(p) for p in parents} - {repo_key(repo.repo_id)}


def build_oracle(spec: CatalogSpec, ids: dict[tuple[str, str], int]) -> Oracle:
    rows = []
    edges: dict[str, set[str]] = {}
    for repo in spec.repos:
        counters = repo.later == "counters"
        downloads = repo.later_downloads if counters else repo.downloads
        likes = repo.later_likes if counters else repo.likes
        when = (repo.later_last_modified if counters else repo.last_modified) or EPOCH
        card_license = repo.later_card_license if counters else repo.card_license
        final = repo.artifacts[1:] if repo.later == "drop" else repo.artifacts
        for parent in _edges(repo, final):
            edges.setdefault(parent, set()).add(repo_key(repo.repo_id))
        for n, a in enumerate(repo.artifacts):
            gone = repo.later == "drop" and n == 0
            status = "gone" if gone else "error" if a.error else "indexed"
            projector = not a.error and a.kind == "mmproj"
            path = a.path if a.error else a.stored_path
            haystack = [repo.repo_id, path, *repo.tags]
            if not a.error:
                haystack += [a.name or "", a.basename or "", a.finetune or "", *a.tags, a.description or ""]
            haystack.append(repo.description or "")
            findings = None if a.error else a.findings
            severity = (
                max((SEVERITIES.index(s) for s in findings), default=None) if findings is not None else None
            )
            item = {
                "id": ids[(repo.repo_id, path)], "repo": repo.repo_id, "path": path,
                "revision": "rev2" if repo.later == "drop" and not gone else "rev1",
                "status": status,
                "error": {"code": "bad_magic", "message": "not a GGUF file"} if status == "error" else None,
                "architecture": None if a.error else _spelled("architecture", a.architecture),
                "parameter_count": 0 if a.error else a.parameter_count,
                "file_type": None if a.error else _spelled("file_type", a.file_type),
                "size_label": None if a.error else _spelled("size_label", a.size_label),
                "license": _spelled("license", (None if a.error else a.license) or card_license),
                "context_length": None if a.error else a.context_length,
                "expert_count": None if a.error else a.expert_count,
                "shard_count": 1 if a.error else a.shards,
                "file_size": 10 if a.error else a.size * a.shards,
                "downloads": downloads, "likes": likes, "last_modified": when,
                "verification_status": a.verification,
                "chat_template_severity": SEVERITIES[severity] if severity is not None else None,
                "chat_template_capabilities": None if a.error or a.capabilities is None
                else [c for c in CAPABILITIES if c in a.capabilities],
                "kind": None if a.error else a.kind,
                "modalities": [m for m in MODALITIES if m in a.modalities] if projector else None,
                "url": f"/v1/artifacts/{ids[(repo.repo_id, path)]}",
            }  # fmt: skip
            rows.append(Row(
                item, repo.repo_id, f"{repo.repo_id}/{path}".lower(), " ".join(haystack).lower(),
                frozenset(() if a.error else a.tensor_types), severity,
                None if a.error else _bucket(a.parameter_count), None if a.error else a.kv,
                None if a.error else a.vocab, None if a.error else a.capabilities,
                a.modalities if projector else None, None if a.error else a.compat,
            ))  # fmt: skip
    return Oracle(rows, edges)


async def write_catalog(db: Database, spec: CatalogSpec) -> Oracle:
    """Write the catalog through the catalog's writer (and the verification results as the
    verify worker records them), then the oracle over it."""
    for repo in spec.repos:
        for snap in repo.writes():
            async with db.sessions() as session, session.begin():
                await upsert_repo_snapshot(session, snap)
    async with db.sessions() as session, session.begin():
        rows = (
            await session.execute(select(Repo.repo_id, Artifact.path, Artifact.id).join(Artifact.repo))
        ).all()
        ids = {(r, p): i for r, p, i in rows}
        for repo in spec.repos:
            for a in repo.artifacts:
                if a.verification is not None:
                    path = a.path if a.error else a.stored_path
                    await session.execute(
                        update(Artifact).where(Artifact.id == ids[(repo.repo_id, path)])
                        .values(verification_status=a.verification)
                    )  # fmt: skip
    return build_oracle(spec, ids)


def item_dict(hit: ArtifactSummary) -> dict[str, Any]:
    """A hit as the model's items are: plain values, its time as a datetime."""
    data: dict[str, Any] = msgspec.to_builtins(hit, builtin_types=(datetime,))
    return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}


# --- strategies -------------------------------------------------------------------------

_word = st.one_of(st.sampled_from(WORDS), st.sampled_from(FOLDING_WORDS))
_maybe_text = st.one_of(st.none(), st.lists(_word, min_size=1, max_size=3).map(" ".join))


@st.composite
def artifact_specs(draw: st.DrawFn, path: str) -> ArtifactSpec:
    if draw(st.integers(0, 7)) == 0:
        return ArtifactSpec(path, error=True, verification=draw(st.sampled_from((None, "failed"))))
    findings = draw(st.one_of(st.none(), st.lists(st.sampled_from(SEVERITIES), max_size=2).map(tuple)))
    return ArtifactSpec(
        path, error=False,
        architecture=draw(st.sampled_from(ARCHITECTURES)), file_type=draw(st.sampled_from(FILE_TYPES)),
        tensor_types=tuple(draw(st.sets(st.sampled_from(TENSOR_TYPES), max_size=2))),
        license=draw(st.sampled_from(LICENSES)), parameter_count=draw(st.sampled_from(PARAMS)),
        context_length=draw(st.sampled_from(CONTEXTS)), size_label=draw(st.sampled_from(SIZE_LABELS)),
        expert_count=draw(st.sampled_from(EXPERTS)), name=draw(_maybe_text),
        basename=draw(st.sampled_from((None, "tiny-llama", "Mixtral"))),
        finetune=draw(st.sampled_from((None, "Instruct", "ünï"))),
        tags=tuple(draw(st.lists(_word, max_size=2))), description=draw(_maybe_text),
        findings=findings, base_models=tuple(draw(st.lists(st.sampled_from(REPO_SPELLINGS), max_size=1))),
        shards=draw(st.sampled_from((1, 1, 2))), size=draw(st.sampled_from(SIZES)),
        verification=draw(st.sampled_from((None, None, *VERIFICATION_STATUSES))),
        kv=draw(st.one_of(st.none(), st.tuples(
            st.sampled_from(KV_BYTES), st.sampled_from(KV_SWA_BYTES), st.sampled_from(KV_WINDOWS)
        ))),
        vocab=draw(st.one_of(st.none(), *[st.tuples(st.sampled_from(VOCAB_KEYS), st.sampled_from(VOCAB_SIZES))] * 3)),
        capabilities=draw(st.one_of(st.none(), *[st.frozensets(st.sampled_from(CAPABILITIES))] * 3)),
        kind=draw(st.sampled_from(("model", "model", "model", "mmproj", "lora"))),
        modalities=draw(st.frozensets(st.sampled_from(MODALITIES))),
        compat=draw(st.one_of(st.none(), st.lists(st.sampled_from(COMPAT_CODES), max_size=2, unique=True).map(tuple))),
    )  # fmt: skip


@st.composite
def repo_specs(draw: st.DrawFn, repo_id: str) -> RepoSpec:
    stems = draw(st.lists(st.sampled_from(PATH_WORDS), min_size=1, max_size=4))
    artifacts = tuple(draw(artifact_specs(f"{stem}-{i}.gguf")) for i, stem in enumerate(stems))
    parents = draw(st.lists(st.sampled_from(REPO_SPELLINGS), max_size=2, unique=True))
    tags = draw(st.lists(st.one_of(st.sampled_from(WORDS), st.sampled_from(
        [f"base_model:{r}" for r in REPO_SPELLINGS] + [f"base_model:quantized:{r}" for r in REPO_SPELLINGS]
    )), max_size=2))  # fmt: skip
    later = draw(st.sampled_from((None, None, "drop", "counters")))
    return RepoSpec(
        repo_id, artifacts, downloads=draw(st.sampled_from(DOWNLOADS)), likes=draw(st.sampled_from(LIKES)),
        last_modified=draw(st.sampled_from(WHEN)), card_license=draw(st.sampled_from(LICENSES)),
        tags=tuple(tags), description=draw(_maybe_text), card_base_model=tuple(parents),
        relation=draw(st.sampled_from(RELATIONS)), later=later,
        later_downloads=draw(st.sampled_from(DOWNLOADS)), later_likes=draw(st.sampled_from(LIKES)),
        later_last_modified=draw(st.sampled_from(WHEN[1:])), later_card_license=draw(st.sampled_from(LICENSES)),
    )  # fmt: skip


@st.composite
def catalogs(draw: st.DrawFn) -> CatalogSpec:
    ids = draw(st.lists(st.sampled_from(REPO_IDS), min_size=1, max_size=len(REPO_IDS), unique=True))
    return CatalogSpec(tuple(draw(repo_specs(r)) for r in ids))


SORT_CHOICES = tuple(f"{k}{s}" for k in (*SORTS, *SORT_ALIASES) for s in ("", ":asc", ":desc"))


@st.composite
def _any_case(draw: st.DrawFn, values: Sequence[str]) -> str:
    """One of the values as is, or in another case: all upper or lower (other scripts too),
    swapped, or some ASCII letters flipped."""
    value = draw(st.sampled_from(values))
    change = draw(st.sampled_from(("as is", "upper", "lower", "swap", "flip")))
    if change == "flip":
        flips = draw(st.lists(st.booleans(), min_size=len(value), max_size=len(value)))
        return "".join(c.swapcase() if c.isascii() and f else c for c, f in zip(value, flips, strict=True))
    return {"as is": value, "upper": value.upper(), "lower": value.lower(), "swap": value.swapcase()}[change]


FILTER_VALUES: dict[str, st.SearchStrategy[Any]] = {
    # owners of REPO_IDS, names that begin one ("or") and names that one begins ("orgs")
    "author": _any_case(("meta", "org", "bart", "z", "ghost", "or", "o", "ba", "me", "orgs", "org-x", "z.x")),
    # ids in any ASCII case (the same repo), non-ASCII letters changed (another one), and
    # ids that begin one ("org/mi") or that one begins ("org/mix-2")
    "repo": st.sampled_from((*REPO_SPELLINGS, "org/MIX", "org/mix-2", "org/mi", "Org/Tune", "meta/ba", "bart/q")),
    "architecture": _any_case((*[a for a in ARCHITECTURES if a], "mamba")),
    "license": _any_case((*[x for x in LICENSES if x], "gpl")),
    "file_type": _any_case([f for f in FILE_TYPES if f]),
    "tensor_type": st.sampled_from((*TENSOR_TYPES, "q4_k", "Q2_K")),
    "min_params": st.sampled_from((*PARAMS, 1, 8_000_000_001)),
    "max_params": st.sampled_from((*PARAMS, 7_999_999_999)),
    # file sizes are SIZES times 1 or 2 shards, and 10 for an error row: each edge and between
    "min_size": st.sampled_from((0, 5, 6, 10, 14, 1000, 2000, 2001)),
    "max_size": st.sampled_from((4, 5, 9, 10, 13, 999, 2000)),
    "size_label": _any_case([s for s in SIZE_LABELS if s]),
    "min_context": st.sampled_from((1, 2048, 8193, 32768)),
    "expert_count": st.sampled_from((2, 8)),
    "verification": st.sampled_from(VERIFICATION_STATUSES),
    "descendant_of": st.sampled_from(REPO_SPELLINGS),
    "template_severity": st.sampled_from(SEVERITIES),
    "kind": st.sampled_from(KINDS),
    "with_projector": st.booleans(),
    "modality": st.lists(st.sampled_from(MODALITIES), min_size=1, max_size=3).map(",".join),
    # One name, or several (possibly repeated, spaced) that must all be there.
    "capability": st.lists(st.sampled_from(CAPABILITIES), min_size=1, max_size=3).map(
        lambda names: ", ".join(names) if len(names) == 3 else ",".join(names)
    ),
    # With the context it sizes, when drawn; a default context most often. The budgets
    # include memories of the catalog's rows exactly (file 5 + 1 byte a token at 2,048 or
    # at the default 4,096, or + 1 sliding byte a token in a 512-token window).
    "max_memory": st.sampled_from((0, 5, 2052, 2053, 4100, 4101, 4613, 8197, 9000, 40_000, 2**62)),
    # A row's index, which `Oracle.bind` turns into its artifact id once the catalog is written.
    "draft_for": st.integers(0, 40),
    # One code, or several that must all be there.
    "finding": st.lists(st.sampled_from(COMPAT_CODES), min_size=1, max_size=2).map(",".join),
    "runs_in": st.just("llama.cpp"),
}
MEMORY_CONTEXTS = (None, None, None, 1, 512, 2048, 4096, 4096, 8192, 65_536, 1 << 40)
# Letters that one case folding or another takes for the same (Python's lower() keeps them apart).
FOLD_VARIANTS = str.maketrans({"ς": "σ", "σ": "ς", "ſ": "s", "s": "ſ", "ǆ": "ǅ", "k": "\u212a", "ß": "ss"})


def catalog_words(spec: CatalogSpec) -> list[str]:
    """The words of every artifact's searchable text."""
    words = set()
    for repo in spec.repos:
        texts = [repo.repo_id, repo.description or "", *repo.tags]
        for a in repo.artifacts:
            texts += [
                a.stored_path,
                a.name or "",
                a.basename or "",
                a.finetune or "",
                *a.tags,
                a.description or "",
            ]
        words |= {w for t in texts for w in t.split()}
    return sorted(words)


@st.composite
def _piece(draw: st.DrawFn, words: Sequence[str]) -> str:
    """A piece of one of the words, as is, upper-cased or with its letters folded."""
    unusual = [w for w in words if not w.isascii()]
    word = draw(st.sampled_from(unusual) if unusual and draw(st.booleans()) else st.sampled_from(words))
    start = draw(st.integers(0, max(0, len(word) - 1)))
    piece = word[start : start + draw(st.integers(1, 6))]
    change = draw(st.sampled_from((lambda w: w, str.upper, lambda w: w.translate(FOLD_VARIANTS))))
    return str(change(piece.lower()))


@st.composite
def queries(
    draw: st.DrawFn, words: Sequence[str] = (), always: tuple[str, ...] = (), sorts: Sequence[str] = SORT_CHOICES
) -> SearchQuery:
    """A query with a few filters (most matching something), any status, sort (of `sorts`) and
    page size; its text from TERMS and pieces of `words`; `always` these filters among them."""
    terms = st.one_of(st.sampled_from(TERMS), _piece(words)) if words else st.sampled_from(TERMS)
    text = draw(st.one_of(st.none(), st.lists(terms, min_size=1, max_size=3).map(" ".join)))
    names = [*always, *draw(st.lists(st.sampled_from(sorted(set(FILTER_VALUES) - set(always))), max_size=2, unique=True))]
    sort = draw(st.sampled_from(sorts))
    sized = "max_memory" in names or sort.startswith("memory")
    memory_context = draw(st.sampled_from(MEMORY_CONTEXTS)) if sized else None
    return SearchQuery(
        text=text,
        **{name: draw(FILTER_VALUES[name]) for name in names},
        memory_context=memory_context,
        status=draw(st.sampled_from(("indexed", "indexed", *STATUSES))),
        sort=sort,
        limit=draw(st.sampled_from((1, 2, 3, 5, 200))),
    )


# The SQLite plan thresholds (registry.catalog.search.PlannerSettings): small values make
# every filter, term and family "common", so the walks along the sort index, LIKE checks,
# memoised short-term scans and family walks are taken on a catalog of a few rows.
THRESHOLDS = ("common_rows", "walk_index_common_rows", "family_common_rows", "family_common_rows_walk_index",
              "common_together_rows", "term_scan_rows", "term_scan_slice", "common_term_rows")  # fmt: skip
ALL_COMMON = {**dict.fromkeys(THRESHOLDS, 0), "term_scan_rows": 600, "term_scan_slice": 2}
plan_thresholds = st.fixed_dictionaries(
    {
        **{name: st.integers(0, 4) for name in THRESHOLDS if name != "term_scan_slice"},
        "term_scan_slice": st.integers(1, 4),
    }
)


class ArbitraryAnswers(Hints):
    """Probe answers that say "common or rare?" at random, without probing: the plans take
    any mix of ways in, which must change nothing but speed."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        self._random = random.Random(seed)

    def get(self, key: Hashable) -> bool | None:
        return self._random.random() < 0.5


@contextlib.contextmanager
def thresholds(db: Database, values: dict[str, int] | None, answers: int | None = None) -> Iterator[None]:
    """The database's planner settings with these thresholds (None: the defaults), its kept
    probe answers emptied before and after, so that the plans follow these thresholds; or,
    with `answers` (a seed), every probe answered at random instead."""
    reads = db.reads
    saved = reads.planner
    reads.planner = PlannerSettings(**values) if values else None
    reads.caches.hints = ArbitraryAnswers(answers) if answers is not None else Hints()
    try:
        yield
    finally:
        reads.planner = saved
        reads.caches.hints = Hints()
