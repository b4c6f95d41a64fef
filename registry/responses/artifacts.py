"""Artifacts: a search hit, an artifact's page and what it holds, facet counts, and the
files that hold given bytes.

Builders read catalog rows by column name (`row.path`, `row.file_size`): a search row
(`catalog.search.SearchPage.rows`) and an artifact row (`api.reads`) share the names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

import msgspec

from registry.gguf.kvcache import KVCache
from registry.gguf.memory import MemoryLine
from registry.responses.base import (
    ArtifactStatus,
    Capability,
    Kind,
    Modality,
    Response,
    Severity,
    Summary,
    Time,
    VerificationStatus,
    doc,
    summarised,
)
from registry.responses.memory import MemoryEstimates, MemoryLineFacts
from registry.responses.operations import Verification, finite
from registry.responses.vocab import (
    CAPABILITIES,
    FACET_NAMES,
    MAX_SIZE_DIFFERENCE,
    MEMORY_CONTEXT,
    MODALITIES,
    SEVERITIES,
)


def _names(values: Sequence[str]) -> list[tuple[str, ...]]:
    # Every bit mask of `values` (bit i for values[i]) as its names, in `values` order.
    return [tuple(v for i, v in enumerate(values) if mask >> i & 1) for mask in range(1 << len(values))]


_CAPABILITY_NAMES = _names(CAPABILITIES)
_MODALITY_NAMES = _names(MODALITIES)


def mask_names(bits: int | None, table: list[tuple[str, ...]]) -> tuple[str, ...] | None:
    """A stored bit mask as names (None stays None); unknown bits are ignored."""
    return None if bits is None else table[bits & (len(table) - 1)]


def severity_name(rank: int | None) -> str | None:
    """A stored worst-severity rank as its name (None stays None)."""
    return SEVERITIES[rank] if rank is not None and 0 <= rank < len(SEVERITIES) else None


# The search copies of these values are stored in one spelling each, whatever the case.
_FOLDED = "In the spelling search matches and facets count; the artifact's `facts` keep the file's own."


class Memory(Response, kw_only=True):
    """What an artifact needs to run at a context: the memory llama.cpp allocates on a CPU with an f16 KV cache
    and a micro-batch of 512 tokens (weights, KV cache, recurrent state, compute and output buffers)."""

    tokens: Annotated[int, doc("The context it is sized at: the context asked for, or the model's own "
                               "context_length when that is shorter.")]  # fmt: skip
    bytes: int
    basis: Annotated[
        Literal["llama.cpp", "file_and_kv_cache"],
        doc("`llama.cpp`: llama.cpp's buffers as above. `file_and_kv_cache`: a row an older release wrote, sized "
            "as it did (the file plus its f16 KV cache) until its next crawl or index."),
    ]


class ArtifactError(Response, kw_only=True):
    code: str | None
    message: str | None


Capabilities = Annotated[
    tuple[Capability, ...] | None,
    doc("What the chat templates can do, each seen in a probe render in the sandbox: `system` (a system message "
        "reaches the prompt), `tools` (a tool definition does), `tool_calls` (an assistant's tool call does), "
        "`thinking` (reasoning is carried, opened or switched), `parallel_tool_calls` (two tool calls of one turn "
        "both do). [] for none or no template; null when not probed (rows an older release wrote, until the next "
        "crawl or index reads them again)."),
]
Modalities = Annotated[
    tuple[Modality, ...] | None,
    doc("What a projector (`kind` mmproj) takes in besides text, from its `clip.has_vision_encoder` and "
        "`clip.has_audio_encoder` flags; [] when it declares neither. Null on every other kind."),
]


class ArtifactSummary(Response, kw_only=True):
    """An artifact as a search lists it."""

    id: int
    repo: str
    path: str
    revision: str | None
    status: ArtifactStatus
    error: ArtifactError | None
    architecture: Annotated[str | None, doc(f"Lower case, e.g. llama. {_FOLDED}")]
    parameter_count: int
    file_type: Annotated[str | None, doc(f"Upper case, e.g. Q4_K_M. {_FOLDED}")]
    size_label: Annotated[str | None, doc(f"Upper case but for an expert count's x, e.g. 7B, 8x7B. {_FOLDED}")]
    license: Annotated[str | None, doc(f"The file's license, else the repo card's; lower case, e.g. apache-2.0. "
                                       f"{_FOLDED}")]  # fmt: skip
    context_length: int | None
    expert_count: int | None
    shard_count: int
    file_size: int
    downloads: int
    likes: int
    last_modified: Time | None
    verification_status: VerificationStatus | None
    chat_template_severity: Annotated[
        Severity | None,
        doc("Worst chat template safety finding; null when clean, without a template or not scanned "
            "(`chat_template_findings` tells these apart on the artifact's page)."),
    ]
    chat_template_capabilities: Capabilities
    kind: Annotated[
        Kind | None,
        doc("What the file is: a model, a multimodal projector (`mmproj`, llama.cpp's --mmproj), a LoRA adapter, "
            "an importance matrix or a vocabulary alone. Null for error rows."),
    ]
    modalities: Modalities
    memory: Annotated[
        Memory | None,
        doc(f"What it needs to run on a CPU as llama.cpp allocates it (`Memory`) at `tokens` tokens: a search's "
            f"`memory_context` (default {MEMORY_CONTEXT}) or an artifact page's `context`, or the model's own "
            "context_length when that is shorter. Null without an estimate (encoders, adapters, error rows)."),
    ]
    url: str

    @classmethod
    def from_row(cls, row: Any, *, repo: str, memory: Memory | None) -> ArtifactSummary:
        """From a search row or an artifact row (its columns by name), in `repo`, needing `memory`."""
        status = row.status
        return cls(
            id=row.id, repo=repo, path=row.path, revision=row.revision, status=status,
            error=ArtifactError(code=row.error_code, message=row.error_message) if status == "error" else None,
            architecture=row.architecture, parameter_count=row.parameter_count, file_type=row.file_type,
            size_label=row.size_label, license=row.license, context_length=row.context_length,
            expert_count=row.expert_count, shard_count=row.shard_count, file_size=row.file_size,
            downloads=row.downloads, likes=row.likes, last_modified=row.last_modified,
            verification_status=row.verification_status,
            chat_template_severity=severity_name(row.chat_template_max_severity),
            chat_template_capabilities=mask_names(row.chat_template_capabilities, _CAPABILITY_NAMES),
            kind=row.kind, modalities=mask_names(row.modalities, _MODALITY_NAMES), memory=memory,
            url=f"/v1/artifacts/{row.id}",
        )  # fmt: skip


class ArtifactPage(Response, kw_only=True):
    """A page of search hits."""

    items: list[ArtifactSummary]
    next: Annotated[str | None, doc("Cursor of the next page; null on the last page.")]
    limit: int


class QuantMixEntry(Response, kw_only=True):
    tensor_type: str
    tensors: int
    elements: int
    bytes: int


class Shard(Response, kw_only=True):
    path: str
    split_no: int
    size: int | None
    sha256: Annotated[str | None, doc("sha256 of the file: the hub's LFS oid, or taken when a local file was "
                                      "indexed. Null when not known.")]  # fmt: skip
    header_bytes: int | None
    url: Annotated[str | None, doc("Where to download the file: the hub's /resolve/ URL at the commit the catalog "
                                   "read (`hub.endpoint`); null for a local folder's files.")]  # fmt: skip


class CompatFinding(Response, kw_only=True):
    """A llama.cpp compatibility finding (codes: docs/compatibility.md)."""

    code: Annotated[str, doc("Stable code, L001...")]
    severity: Annotated[
        Literal["error", "warning", "info"],
        doc("error: llama.cpp refuses to load the file; warning: it loads but misbehaves; info: worth knowing."),
    ]
    field: Annotated[str, doc("The metadata key or tensor name it concerns.")]
    message: str


class TemplateFinding(Response, kw_only=True, forbid_unknown_fields=False):
    """A chat template safety finding."""

    code: Annotated[str, doc("Stable kind of problem, e.g. dunder-attribute.")]
    severity: Severity
    message: str
    excerpt: Annotated[str, doc("The offending part of the template or its output (bounded).")] = ""
    template: Annotated[str, doc("`default` or the name of a named template variant.")] = "default"

    @classmethod
    def list_from(cls, stored: Any) -> list[TemplateFinding] | None:
        """The findings column (JSON) as findings: None stays None (not scanned); an entry of
        another shape (a newer scanner's) is left out rather than failing the page."""
        if stored is None:
            return None
        out = []
        for item in stored if isinstance(stored, list) else ():
            try:
                out.append(msgspec.convert(item, cls))
            except msgspec.ValidationError:
                continue
        return out


class KVCacheAt(Response, kw_only=True):
    tokens: int
    bytes: int


class KVCacheFacts(Response, kw_only=True, forbid_unknown_fields=False):
    """The f16 KV cache per token of context (registry/gguf/kvcache.py): `layers` full-attention layers of
    `bytes_per_token` together, and `swa_layers` that keep only the last `sliding_window` tokens: at N tokens it
    takes N * bytes_per_token + min(N, sliding_window) * swa_bytes_per_token bytes; `at_context_length` is that
    at the model's context_length. A hybrid model's `recurrent_layers` keep a fixed-size state instead, not
    counted."""

    layers: int
    bytes_per_token: int
    swa_layers: int = 0
    swa_bytes_per_token: int = 0
    sliding_window: int | None = None
    at_context_length: int | None = None
    recurrent_layers: int = 0
    at_context: Annotated[KVCacheAt | msgspec.UnsetType, doc("At the tokens `memory` is sized at; only when an "
                                                             "artifact page is asked for a `context`.")] = msgspec.UNSET  # fmt: skip

    def bytes_at(self, tokens: int) -> int:
        """The cache at `tokens` tokens, as the format core sizes it."""
        cache = KVCache(self.layers, self.bytes_per_token, swa_bytes_per_token=self.swa_bytes_per_token,
                        sliding_window=self.sliding_window)  # fmt: skip
        return cache.bytes_at(tokens)


class SplitInfo(Response, kw_only=True):
    no: Annotated[int, doc("0-based index of the first shard (split.no).")]
    count: int
    tensors_count: int


class BaseModelRef(Response, kw_only=True, forbid_unknown_fields=False):
    """One `general.base_model.{i}.*` group, with the hub repo id resolved where possible."""

    name: str | None = None
    organization: str | None = None
    version: str | None = None
    repo_url: str | None = None
    url: str | None = None
    doi: str | None = None
    uuid: str | None = None
    repo_id: str | None = None


class Facts(Response, kw_only=True):
    """Every fact the catalog derived from the file's header (registry/gguf/facts_model.py), but those the
    artifact page shows on its own (quant_mix, chat_template(s), metadata)."""

    architecture: str | None
    name: str | None
    basename: str | None
    finetune: str | None
    version: str | None
    size_label: str | None
    size_label_source: Annotated[str | None, doc("file or computed.")]
    parameter_count: int
    license: str | None
    license_name: str | None
    license_link: str | None
    file_type: str | None
    file_type_source: Annotated[str | None, doc("file or inferred.")]
    bits_per_weight: float | None
    context_length: int | None
    embedding_length: int | None
    block_count: int | None
    feed_forward_length: int | None
    head_count: int | None
    head_count_kv: int | None
    expert_count: int | None
    expert_used_count: int | None
    rope: dict[str, Any]
    tokenizer_model: str | None
    tokenizer_pre: str | None
    vocab_size: int | None
    vocab_sha256: Annotated[
        str | None,
        doc(f"The vocabulary key (registry/gguf/vocab.py): artifacts with the same key and at most "
            f"{MAX_SIZE_DIFFERENCE} tokens more or fewer can draft for one another in speculative decoding "
            "(`draft_for`). Null: no token list, or an older release wrote it (until the next crawl or index)."),
    ]
    bos_token_id: int | None
    eos_token_id: int | None
    chat_template_sha256: str | None
    base_models: list[BaseModelRef] | Summary
    source: dict[str, Any]
    tags: list[str] | Summary
    languages: list[str] | Summary
    datasets: list[str] | Summary
    description: str | Summary | None
    kind: Kind
    modalities: Annotated[
        dict[str, str | None],
        doc("A projector's inputs (vision, audio), each with the projector type its file names "
            "(clip.{vision,audio}.projector_type, else clip.projector_type). Empty on every other kind."),
    ]
    gguf_version: int
    endianness: str
    alignment: int
    tensor_count: int
    kv_count: int
    header_bytes: int
    file_size: int | None
    split: SplitInfo | None
    shard_count: int
    kv_cache: Annotated[
        KVCacheFacts | None,
        doc("Null: not estimated (encoders, purely recurrent models, adapters), or indexed before the estimate "
            "existed (`--full` writes it)."),
    ]
    memory_line: Annotated[
        MemoryLineFacts | None,
        doc("Null: not estimated, or written by a release before the llama.cpp estimate (its next crawl or index "
            "writes it)."),
    ] = None

    @classmethod
    def from_row(cls, values: Mapping[str, Any], memory_line: MemoryLine | None = None) -> Facts:
        """From a facts row by column name (`extra` holds the facts without a column of their own),
        with the memory line its artifact row holds. A fact an older release did not write reads as
        its empty value."""
        extra: Mapping[str, Any] = values["extra"] or {}
        get = extra.get
        return cls(
            architecture=values["architecture"], name=values["name"], basename=values["basename"],
            finetune=values["finetune"], version=values["version"], size_label=values["size_label"],
            size_label_source=values["size_label_source"], parameter_count=values["parameter_count"],
            license=values["license"], license_name=get("license_name"), license_link=get("license_link"),
            file_type=values["file_type"], file_type_source=values["file_type_source"],
            bits_per_weight=finite(values["bits_per_weight"]), context_length=values["context_length"],
            embedding_length=values["embedding_length"], block_count=values["block_count"],
            feed_forward_length=values["feed_forward_length"], head_count=values["head_count"],
            head_count_kv=values["head_count_kv"], expert_count=values["expert_count"],
            expert_used_count=values["expert_used_count"], rope=_object(get("rope")),
            tokenizer_model=values["tokenizer_model"], tokenizer_pre=values["tokenizer_pre"],
            vocab_size=values["vocab_size"], vocab_sha256=get("vocab_sha256"), bos_token_id=get("bos_token_id"),
            eos_token_id=get("eos_token_id"), chat_template_sha256=values["chat_template_sha256"],
            base_models=_typed(get("base_models"), list[BaseModelRef], []),
            source=_object(get("source")), tags=_texts(get("tags")), languages=_texts(get("languages")),
            datasets=_texts(get("datasets")), description=_text(get("description")), kind=values["kind"],
            modalities=_typed(get("modalities"), dict[str, str | None], {}), gguf_version=values["gguf_version"],
            endianness=values["endianness"], alignment=values["alignment"], tensor_count=values["tensor_count"],
            kv_count=values["kv_count"], header_bytes=values["header_bytes"], file_size=values["file_size"],
            split=_typed(get("split"), SplitInfo | None, None), shard_count=values["shard_count"],
            kv_cache=_typed(get("kv_cache"), KVCacheFacts | None, None),
            memory_line=None if memory_line is None else MemoryLineFacts.of(memory_line),
        )  # fmt: skip


def _typed(value: Any, kind: Any, empty: Any) -> Any:
    """A stored JSON value as `kind`, summarised when long; `empty` when absent or of another
    shape (a row written by another release): a page shows what it can read."""
    if value is None:
        return empty
    if isinstance(value, list) and len(value) > 64:
        return summarised(value)
    try:
        return msgspec.convert(value, kind)
    except msgspec.ValidationError:
        return empty


def _object(value: Any) -> dict[str, Any]:
    return summarised(value) if isinstance(value, dict) else {}


def _texts(value: Any) -> list[str] | Summary:
    if not isinstance(value, list):
        return []
    out: list[str] | Summary = summarised([str(v) for v in value])
    return out


def _text(value: Any) -> str | Summary | None:
    return summarised(value) if isinstance(value, str) else None


class Projector(Response, kw_only=True):
    """A multimodal projector beside an artifact."""

    id: int
    path: str
    file_size: int
    modalities: Modalities
    url: str

    @classmethod
    def from_row(cls, row: Any) -> Projector:
        return cls(id=row.id, path=row.path, file_size=row.file_size,
                   modalities=mask_names(row.modalities, _MODALITY_NAMES), url=f"/v1/artifacts/{row.id}")  # fmt: skip


class HeaderRead(Response, kw_only=True):
    """How the artifact's header was read by the crawl that indexed it."""

    mode: Annotated[str, doc("`full`: every header byte read from the file; `sibling`: the large arrays "
                             "(vocabulary) taken from another quantization of the same model in the repo "
                             "after its layout, file size and sampled bytes were proven equal.")]  # fmt: skip
    leader: Annotated[str | None, doc("For `sibling`: the path of the file whose bytes were reused.")]
    samples: Annotated[int | None, doc("For `sibling`: ranges compared with the leader's bytes.")]
    confirmed: Annotated[bool | None, doc("True when a verification read the whole file and its facts equal "
                                          "the stored ones, false when they differ, null before.")]  # fmt: skip

    @classmethod
    def from_row(cls, row: Any) -> HeaderRead | None:
        if row.header_read is None:
            return None
        return cls(mode=row.header_read, leader=row.header_leader, samples=row.header_samples,
                   confirmed=row.header_confirmed)  # fmt: skip


class Tensor(Response, kw_only=True):
    name: str
    type: Annotated[str, doc("ggml type, e.g. Q4_K.")]
    shape: Annotated[list[int], doc("ggml order: the first dimension varies fastest.")]
    bytes: int
    shard: Annotated[int, doc("The split file it is in, from 0.")]
    offset: Annotated[int, doc("Where its data starts in that file's tensor data section.")]


class TensorPage(Response, kw_only=True):
    """A page of an artifact's tensors, in file order."""

    items: list[Tensor]
    total: Annotated[int, doc("Tensors the artifact declares.")]
    stored: Annotated[int, doc("Of those, the first the catalog keeps (all but for hostile headers).")]
    matched: Annotated[int, doc("Of the stored, those the name filter keeps.")]
    offset: int
    limit: int
    next_offset: Annotated[int | None, doc("`offset` of the next page; null on the last.")]


class FindingCounts(Response, kw_only=True):
    """llama.cpp compatibility findings by severity."""

    error: int
    warning: int
    info: int


class ArtifactInRepo(ArtifactSummary, kw_only=True):
    """An artifact as its repo's page lists it: the search hit with its facts and files."""

    facts: Facts | None
    quant_mix: Annotated[list[QuantMixEntry], doc("Per tensor type, most bytes first.")]
    shards: Annotated[list[Shard], doc("Its files, in split order.")]
    latest_verification: Verification | None
    header_read: Annotated[HeaderRead | None, doc("How the header was read; null for rows indexed before it "
                                                  "was recorded and for local files.")]  # fmt: skip
    chat_template_findings: Annotated[
        list[TemplateFinding] | None,
        doc("Safety findings for the chat templates, worst first. [] when scanned and clean, or when the file "
            "has no chat template (`facts.chat_template_sha256` null); null when not scanned (error rows, "
            "scanner unavailable, indexed before scanning existed)."),
    ]
    runs_in_llama_cpp: Annotated[
        bool | None,
        doc("llama.cpp loads it: no error-severity finding. null: not checked yet (indexed by an older release, "
            "or an error row whose error llama.cpp may not share)."),
    ]
    llama_cpp_finding_counts: Annotated[
        FindingCounts, doc("Its llama.cpp compatibility findings counted by severity (all 0 when not checked).")
    ]


class Artifact(ArtifactInRepo, kw_only=True):
    """One artifact in full."""

    chat_template: Annotated[str | None, doc("The default chat template, as text.")]
    chat_templates: Annotated[dict[str, str], doc("The named chat templates, by name.")]
    metadata: Annotated[
        dict[str, Any],
        doc("Scalar metadata of the first shard; long arrays and strings are summarised as {summary, length, head}."),
    ]
    projectors: Annotated[
        list[Projector],
        doc("The indexed multimodal projectors in the artifact's repo (itself left out), the first (`maxItems`) "
            "by path: the files to give llama.cpp's --mmproj with a model, and what each takes in."),
    ]
    llama_cpp_findings: Annotated[
        list[CompatFinding],
        doc("llama.cpp compatibility findings from the header and the chat template, worst first; [] when none "
            "or not checked (`runs_in_llama_cpp` null)."),
    ]
    memory_estimate: Annotated[
        MemoryEstimates | None,
        doc("What llama.cpp allocates, part by part, at the tokens `memory` is sized at and the page's `batch`, "
            "`cache_type` and `flash_attention`; null where `facts.memory_line` is."),
    ] = None


def facet_values(values: Sequence[str]) -> dict[str, Any]:
    return {"propertyNames": {"enum": list(values)}}


class Facets(Response, kw_only=True):
    """Counts of the matching artifacts per value of each facet."""

    facets: Annotated[
        dict[str, dict[str, int]],
        msgspec.Meta(
            description="Per facet asked for (`facets`), in that order (by default architecture, license, "
            "file_type and size_bucket): artifacts per value. Architecture, license and file type values in the "
            "spelling search hits show; `unknown`: no value. An artifact counts under each capability its chat "
            "templates have; `verification` counts by the latest verification's status (`unknown`: never).",
            extra_json_schema=facet_values(FACET_NAMES),
        ),
    ]
    filters: Annotated[
        dict[str, str | int | bool],
        doc("The filters the counts were taken under, as applied: architecture, license, file type and size "
            "label in the spelling the facets show."),
    ]


class FileArtifact(Response, kw_only=True):
    id: int
    path: str
    status: ArtifactStatus


class FileMatch(Response, kw_only=True):
    """One file of the catalog that holds the bytes a sha256 names."""

    repo: str
    path: str
    split_no: int
    size: int | None
    revision: str | None
    artifact: FileArtifact
    url: Annotated[str | None, doc("Where to download the file: the hub's /resolve/ URL at the commit the catalog "
                                   "read; null for a local folder's files.")]  # fmt: skip


class FileMatches(Response, kw_only=True):
    sha256: str
    count: Annotated[int, doc("How many files of the catalog hold these bytes; `files` lists the first of them "
                              "(`maxItems`), indexed artifacts first.")]
    files: list[FileMatch]


__all__ = [
    "Artifact", "ArtifactError", "ArtifactInRepo", "ArtifactPage", "ArtifactSummary", "BaseModelRef", "Facets", "Facts",
    "FileArtifact", "FileMatch", "FileMatches", "FindingCounts", "KVCacheAt", "KVCacheFacts", "Memory", "Projector", "QuantMixEntry", "Shard",
    "SplitInfo", "TemplateFinding", "Tensor", "TensorPage", "mask_names", "severity_name",
]  # fmt: skip
