"""Facts a catalog keeps about an artifact, derived from its parsed header(s).

`derive_facts` takes the header of a single file, or the headers of every shard of a
split model, and returns one `Facts`. It reads only what the parser already holds: array
values stay lazy (the vocabulary size is `len()` of the token array; nothing decodes
262,144 strings to count them).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from itertools import islice
from typing import Any
from urllib.parse import urlsplit

from registry.gguf.errors import GGUFError, InconsistentShards, TruncatedFile
from registry.gguf.facts_model import MODALITIES, BaseModel, Facts, QuantMixEntry, SplitInfo
from registry.gguf.kvcache import kv_cache
from registry.gguf.memory_profile import memory_profile
from registry.gguf.model import GGUFHeader, TensorInfo
from registry.gguf.types import TENSOR_TYPES, GGMLType, ValueType, file_type_label
from registry.gguf.vocab import vocab_sha256

# Arrays are summarised in `Facts.metadata` instead of copied, except small ones. Numeric
# arrays get a higher bound because per-layer hyperparameters (head counts, sliding window
# patterns) are arrays of one number per block, and real models have up to ~130 blocks.
SMALL_STRING_ARRAY = 64
SMALL_NUMERIC_ARRAY = 256
# Tags, languages and datasets are short lists in practice; a hostile file could declare
# millions, which a catalog row must not carry.
MAX_LIST_ITEMS = 256

# Group indices of at most 18 digits: int() refuses strings of more than 4,300 digits, and
# no writer numbers groups past a handful, so longer ones are not groups at all.
_BASE_MODEL_KEY = re.compile(r"general\.base_model\.(\d{1,18})\.(\w+)")
_DATASET_KEY = re.compile(r"general\.dataset\.(\d{1,18})\.(\w+)")
_REPO_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_EXPERT_TENSOR = "_exps."


# -- reading typed values out of a header ----------------------------------------------------


def _str(header: GGUFHeader, key: str) -> str | None:
    value = header.get(key)
    return value if isinstance(value, str) else None


def _int(header: GGUFHeader, key: str) -> int | None:
    value = header.get(key)
    # bool is an int subclass; a BOOL-typed field is not a count.
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _bool(header: GGUFHeader, key: str) -> bool:
    """A BOOL-typed flag; absent or of another type: False (a loader reading it as a bool
    would refuse an int there)."""
    value = header.get(key)
    return value if isinstance(value, bool) else False


def _is_array(header: GGUFHeader, key: str) -> bool:
    f = header.fields.get(key)
    return f is not None and f.type is ValueType.ARRAY


def _int_or_max(header: GGUFHeader, key: str) -> int | None:
    """An int, or the largest entry of a per-layer int array (some models vary per layer)."""
    if not _is_array(header, key):
        return _int(header, key)
    arr = header.get(key)
    if arr.element_type in (ValueType.STRING, ValueType.ARRAY, ValueType.BOOL) or len(arr) == 0:
        return None
    values = arr.to_numpy()
    if values.dtype.kind not in "iu":
        return None
    return int(values.max())


def _string_list(header: GGUFHeader, key: str) -> list[str]:
    if not _is_array(header, key):
        value = _str(header, key)
        return [value] if value else []
    arr = header.get(key)
    if arr.element_type is not ValueType.STRING:
        return []
    # islice over the lazy iterator: slicing would index every element of a huge array.
    return [s for s in islice(arr, MAX_LIST_ITEMS) if s]


def json_safe(value: Any) -> Any:
    """A metadata scalar as a JSON-ready value (NaN and infinities become strings)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def summarize_value(field_type: ValueType, value: Any) -> Any:
    """A scalar as is; an array as a list when small, else a summary of type and count."""
    if field_type is not ValueType.ARRAY:
        return json_safe(value)
    et = value.element_type
    limit = SMALL_STRING_ARRAY if et in (ValueType.STRING, ValueType.ARRAY) else SMALL_NUMERIC_ARRAY
    if len(value) <= limit and et is not ValueType.ARRAY:
        return [json_safe(v) for v in value.to_list()]
    return {"type": "array", "element_type": et.name, "count": len(value)}


def _metadata(header: GGUFHeader) -> dict[str, Any]:
    return {key: summarize_value(f.type, f.value) for key, f in header.fields.items()}


def _prefixed(header: GGUFHeader, prefix: str) -> dict[str, Any]:
    return {
        key[len(prefix) :]: summarize_value(f.type, f.value)
        for key, f in header.fields.items()
        if key.startswith(prefix)
    }


# -- size labels -----------------------------------------------------------------------------


def rounded_notation(count: int, min_digits: int = 2) -> str:
    """A parameter count the way llama.cpp's converters write it: 135M, 1.5B, 7.2B, 71B, 1.2T.

    Keeps at least `min_digits` significant digits. Matches gguf-py's
    `model_weight_count_rounded_notation`, including its scale thresholds (strictly
    greater than 1e6/1e9/1e12, so exactly 1,000,000 is "1000K").
    """
    # Multiplying by 1e-9 (not dividing by 1e9) as gguf-py does: the two can differ in
    # the last bit, which decides the rounding of a count that sits on a .5 boundary.
    scale, suffix = next(
        ((s, x) for t, s, x in ((1e12, 1e-12, "T"), (1e9, 1e-9, "B"), (1e6, 1e-6, "M")) if count > t),
        (1e-3, "K"),
    )
    scaled = count * scale
    whole = round(scaled)
    int_digits = len(str(whole)) if whole else 0
    decimals = max(min_digits - int_digits, 0)
    return f"{scaled:.{decimals}f}{suffix}"


def _expert_split(tensors: Sequence[TensorInfo]) -> tuple[int, int, int]:
    """(shared params, params of one expert, expert count) as gguf-py's writer counts them.

    Stacked expert tensors (`*_exps.*`, 3-D, experts along ggml dim 2; for biases along
    dim 1) add one expert's share; everything else is shared. The expert count is the
    mean over expert tensors, which tolerates models whose layers differ.
    """
    shared = expert = expert_sum = n_expert_tensors = 0
    for t in tensors:
        if _EXPERT_TENSOR in t.name and len(t.shape) >= 3:
            n = t.shape[1] if ".bias" in t.name else t.shape[2]
            if n > 0:
                expert += t.n_elements // n
                expert_sum += n
                n_expert_tensors += 1
                continue
        shared += t.n_elements
    experts = expert_sum // n_expert_tensors if n_expert_tensors else 0
    return shared, expert, experts


def computed_size_label(tensors: Sequence[TensorInfo]) -> str | None:
    """`7.2B`, or `8x7.2B` for a mixture of experts (expert count x shared+one expert)."""
    shared, expert, experts = _expert_split(tensors)
    if experts > 0:
        return f"{experts}x{rounded_notation(shared + expert)}"
    total = shared
    return rounded_notation(total) if total > 0 else None


# -- lineage and provenance ------------------------------------------------------------------


def repo_id_from_url(url: str) -> str | None:
    """`https://huggingface.co/org/name[/tree/main]` -> "org/name"; None for other hosts.

    Any host that is or ends in huggingface.co or hf.co counts (mirrors such as
    `hf.co/org/name`). Dataset and Space URLs are not model repos and give None.
    """
    url = url.strip()
    if "://" not in url:  # "huggingface.co/org/name" as people paste it
        url = "https://" + url
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    host = (parts.hostname or "").lower()
    if not any(host == h or host.endswith("." + h) for h in ("huggingface.co", "hf.co")):
        return None
    segments = [s for s in parts.path.split("/") if s]
    if not segments or segments[0] in ("datasets", "spaces", "models"):
        return None
    segments = segments[:2]
    segments[-1] = segments[-1].removesuffix(".git")
    if not all(_REPO_PART.fullmatch(s) for s in segments):
        return None
    return "/".join(segments)


def _repo_id_from_names(organization: str | None, name: str | None) -> str | None:
    """Organization "Meta Llama" and name "Llama 3.1 8B" -> "Meta-Llama/Llama-3.1-8B".

    gguf-py writes display names with spaces where the repo id had dashes; the hub
    resolves repo ids case-insensitively, so dashes restore a usable id. Names that still
    are not valid repo id parts give None rather than a guess.
    """
    if not organization or not name:
        return None
    org, model = (re.sub(r"\s+", "-", s.strip()) for s in (organization, name))
    if not (_REPO_PART.fullmatch(org) and _REPO_PART.fullmatch(model)):
        return None
    return f"{org}/{model}"


def _groups(header: GGUFHeader, pattern: re.Pattern[str]) -> dict[int, dict[str, Any]]:
    """`general.base_model.{i}.{key}` style groups, by index, from the keys present.

    Driven by the keys rather than by the `.count` field so that a hostile count of 2^32
    costs nothing, and a group is kept even when the count is missing or too small.
    """
    groups: dict[int, dict[str, Any]] = {}
    for key, f in header.fields.items():
        m = pattern.fullmatch(key)
        if m is not None and f.type is ValueType.STRING:
            groups.setdefault(int(m[1]), {})[m[2]] = f.value
    return dict(sorted(groups.items()))


def _base_models(header: GGUFHeader) -> tuple[BaseModel, ...]:
    models = []
    for g in _groups(header, _BASE_MODEL_KEY).values():
        repo_id = None
        if g.get("repo_url"):
            repo_id = repo_id_from_url(g["repo_url"])
        if repo_id is None:
            repo_id = _repo_id_from_names(g.get("organization"), g.get("name"))
        models.append(
            BaseModel(
                name=g.get("name"),
                organization=g.get("organization"),
                version=g.get("version"),
                repo_url=g.get("repo_url"),
                url=g.get("url"),
                doi=g.get("doi"),
                uuid=g.get("uuid"),
                repo_id=repo_id,
            )
        )
    return tuple(models)


def _datasets(header: GGUFHeader) -> tuple[str, ...]:
    """`general.datasets` (older string array) plus newer `general.dataset.{i}.*` groups."""
    names = _string_list(header, "general.datasets")
    for g in _groups(header, _DATASET_KEY).values():
        ref = (repo_id_from_url(g["repo_url"]) if g.get("repo_url") else None) or g.get("name")
        if ref:
            names.append(ref)
    return tuple(dict.fromkeys(names))[:MAX_LIST_ITEMS]


# -- kind, file type, quant mix --------------------------------------------------------------


def _kind(header: GGUFHeader, tensor_count: int) -> str:
    general_type = (_str(header, "general.type") or "").lower()
    if general_type in ("mmproj", "clip") or _str(header, "general.architecture") == "clip":
        return "mmproj"
    if general_type == "adapter":
        adapter = (_str(header, "adapter.type") or "lora").lower()
        # aLoRA (activated LoRA) is a LoRA with an invocation sequence; control vectors
        # and other adapters are not, and stay "model" rather than being mislabelled.
        if adapter in ("lora", "alora"):
            return "lora"
    if general_type == "imatrix" or any(k.startswith("imatrix.") for k in header.fields):
        return "imatrix"
    if general_type == "vocab" or (tensor_count == 0 and "tokenizer.ggml.tokens" in header.fields):
        return "vocab"
    return "model"


# A projector type is a short name (`gemma3`, `qwen2.5o`); longer text is cut to this.
PROJECTOR_TYPE_LENGTH = 64


def _modalities(header: GGUFHeader) -> dict[str, str | None]:
    """A projector's inputs with their projector types: `clip.has_{vision,audio}_encoder`,
    and `clip.{vision,audio}.projector_type`, else the shared `clip.projector_type`."""
    shared = _str(header, "clip.projector_type")
    out: dict[str, str | None] = {}
    for m in MODALITIES:
        if _bool(header, f"clip.has_{m}_encoder"):
            kind = _str(header, f"clip.{m}.projector_type") or shared
            out[m] = kind[:PROJECTOR_TYPE_LENGTH] if kind else None
    return out


def _quant_mix(tensors: Sequence[TensorInfo]) -> dict[str, QuantMixEntry]:
    by_type: dict[GGMLType, list[int]] = {}  # keyed by the member: its `.name` is slow to ask per tensor
    for t in tensors:
        entry = by_type.setdefault(t.type, [0, 0, 0])
        entry[0] += 1
        entry[1] += t.n_elements
        entry[2] += t.n_bytes
    # Largest share first, so the first entry reads as the dominant type.
    ordered = sorted(((k.name, v) for k, v in by_type.items()), key=lambda kv: (-kv[1][2], kv[0]))
    return {name: QuantMixEntry(tensors=n, elements=e, bytes=b) for name, (n, e, b) in ordered}


def infer_file_type(tensors: Sequence[TensorInfo]) -> str | None:
    """The type holding most elements among weight matrices (2-D and up).

    Quantized types win over float ones: a Q4_K file keeps norms in F32 and sometimes
    embeddings in F16, which can outweigh single quant types but do not describe it.
    Honest about what it knows: it gives a ggml type name ("Q4_K"), never a recipe name
    such as "Q4_K_M" that only the quantizer's own `general.file_type` can tell.
    """
    elements: dict[str, int] = {}
    quantized: set[str] = set()
    for t in tensors:
        if len(t.shape) >= 2:
            elements[t.type.name] = elements.get(t.type.name, 0) + t.n_elements
            if TENSOR_TYPES[t.type].quantized:
                quantized.add(t.type.name)
    pool = {k: v for k, v in elements.items() if k in quantized} or elements
    if not pool:
        return None
    return max(sorted(pool), key=lambda k: pool[k])


def _file_type(header: GGUFHeader, tensors: Sequence[TensorInfo]) -> tuple[str | None, str | None]:
    value = _int(header, "general.file_type")
    label = file_type_label(value) if value is not None else None
    if label is not None:
        return label, "file"
    inferred = infer_file_type(tensors)
    return inferred, "inferred" if inferred is not None else None


# -- split models ----------------------------------------------------------------------------


def _split_info(header: GGUFHeader) -> SplitInfo | None:
    count = _int(header, "split.count")
    if count is None:
        return None
    no = _int(header, "split.no")
    tensors_count = _int(header, "split.tensors.count")
    if no is None or tensors_count is None:
        raise InconsistentShards("split.count without split.no or split.tensors.count", field="split.no")
    return SplitInfo(no=no, count=count, tensors_count=tensors_count)


def _order_shards(headers: Sequence[GGUFHeader]) -> tuple[list[GGUFHeader], list[int], SplitInfo | None]:
    """Headers in shard order with their positions in the input, after checking the set."""
    infos = [_split_info(h) for h in headers]
    if len(headers) == 1 and infos[0] is None:
        return list(headers), [0], None
    if len(headers) == 1 and infos[0] is not None and infos[0].count > 1:
        raise InconsistentShards(
            f"shard {infos[0].no + 1} of a {infos[0].count}-shard split model alone; the facts need every shard",
            field="split.count",
        )
    if any(i is None for i in infos):
        raise InconsistentShards("several headers given but not all carry split.* keys", field="split.count")
    splits = [i for i in infos if i is not None]
    first = splits[0]
    if any(s.count != first.count for s in splits):
        counts = sorted({s.count for s in splits})
        raise InconsistentShards(f"shards disagree on split.count: {counts}", field="split.count")
    if any(s.tensors_count != first.tensors_count for s in splits):
        raise InconsistentShards("shards disagree on split.tensors.count", field="split.tensors.count")
    nos = sorted(s.no for s in splits)
    # The length test first: split.count comes from the file and may be 2**64 - 1.
    if len(nos) != first.count or nos != list(range(first.count)):
        raise InconsistentShards(
            f"split.no of the shards are {nos}, expected 0..{first.count - 1} each once", field="split.no"
        )
    order = sorted(range(len(headers)), key=lambda i: splits[i].no)
    ordered = [headers[i] for i in order]
    total = sum(h.tensor_count for h in ordered)
    if total != first.tensors_count:
        raise InconsistentShards(
            f"split.tensors.count is {first.tensors_count} but the shards hold {total} tensors",
            field="split.tensors.count",
        )
    arch = _str(ordered[0], "general.architecture")
    for h in ordered[1:]:
        other = _str(h, "general.architecture")
        if other is not None and arch is not None and other != arch:
            raise InconsistentShards(f"shards of {arch!r} and {other!r} mixed", field="general.architecture")
    return ordered, order, SplitInfo(no=0, count=first.count, tensors_count=first.tensors_count)


def _check_names(headers: Sequence[GGUFHeader]) -> None:
    seen: set[str] = set()
    for h in headers:
        for t in h.tensors:
            if t.name in seen:
                raise InconsistentShards(f"tensor {t.name!r} appears in two shards", field=t.name)
            seen.add(t.name)


def _check_data_fits(header: GGUFHeader, file_size: int | None) -> None:
    """Tensor data the infos describe must fit in the file, or the counts are lies."""
    if file_size is None or not header.tensors:
        return
    end = header.data_offset + header.data_size
    if end > file_size:
        last = max(header.tensors, key=lambda t: t.offset + t.n_bytes)
        raise TruncatedFile(
            f"tensor data ends at byte {end} but the file has {file_size} bytes",
            field=last.name,
            offset=last.info_offset,
        )


# -- the whole -------------------------------------------------------------------------------


def chat_template_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def derive_facts(
    headers: Sequence[GGUFHeader],
    *,
    file_sizes: Sequence[int | None] | None = None,
    leader: tuple[GGUFHeader, Facts] | None = None,
) -> Facts:
    """Facts of one artifact from its header, or from all shards' headers in any order.

    Shard 0 carries the metadata; every shard carries tensor infos. `file_sizes` (same
    order as `headers`) overrides each header's own `file_size`; when a size is known the
    tensor data must fit in it. Raises `InconsistentShards` when the headers are not one
    complete split set and `GGUFError` subclasses for counts the file cannot hold.
    `leader` is a sibling's header and facts: what depends only on arrays the two share
    (the vocabulary key) is taken from it instead of derived again.
    """
    if not headers:
        raise GGUFError("no headers to derive facts from")
    if file_sizes is not None and len(file_sizes) != len(headers):
        raise ValueError("file_sizes must have one entry per header")
    ordered, order, split = _order_shards(headers)
    sizes = [(file_sizes[i] if file_sizes is not None else None) or headers[i].file_size for i in order]
    for h, size in zip(ordered, sizes, strict=True):
        _check_data_fits(h, size)
    if len(ordered) > 1:
        _check_names(ordered)

    h0 = ordered[0]
    tensors = [t for h in ordered for t in h.tensors]
    params = sum(t.n_elements for t in tensors)
    total_bytes = sum(t.n_bytes for t in tensors)
    arch = _str(h0, "general.architecture")
    a = f"{arch}." if arch else "\0"  # a prefix no key has, when the architecture is unknown
    kind = _kind(h0, len(tensors))

    size_label, size_source = _str(h0, "general.size_label"), "file"
    if not size_label:
        # A LoRA's tensors are low-rank factors: their element count says nothing about the
        # size class of the model it adapts, so no label is made up for one.
        size_label = computed_size_label(tensors) if kind != "lora" else None
        size_source = "computed"
    file_type, file_type_source = _file_type(h0, tensors)

    template = _str(h0, "tokenizer.chat_template")
    templates = {
        key.removeprefix("tokenizer.chat_template."): f.value
        for key, f in h0.fields.items()
        if key.startswith("tokenizer.chat_template.") and isinstance(f.value, str)
    }
    vocab_size = len(h0.get("tokenizer.ggml.tokens")) if _is_array(h0, "tokenizer.ggml.tokens") else None
    if vocab_size is None:
        vocab_size = _int(h0, f"{a}vocab_size")

    return Facts(
        architecture=arch,
        name=_str(h0, "general.name"),
        basename=_str(h0, "general.basename"),
        finetune=_str(h0, "general.finetune"),
        version=_str(h0, "general.version"),
        size_label=size_label,
        size_label_source=size_source if size_label else None,
        parameter_count=params,
        license=_str(h0, "general.license"),
        license_name=_str(h0, "general.license.name"),
        license_link=_str(h0, "general.license.link"),
        file_type=file_type,
        file_type_source=file_type_source,
        quant_mix=_quant_mix(tensors),
        bits_per_weight=total_bytes * 8 / params if params else None,
        context_length=_int(h0, f"{a}context_length"),
        embedding_length=_int(h0, f"{a}embedding_length"),
        block_count=_int(h0, f"{a}block_count"),
        feed_forward_length=_int_or_max(h0, f"{a}feed_forward_length"),
        head_count=_int_or_max(h0, f"{a}attention.head_count"),
        head_count_kv=_int_or_max(h0, f"{a}attention.head_count_kv"),
        expert_count=_int(h0, f"{a}expert_count"),
        expert_used_count=_int(h0, f"{a}expert_used_count"),
        rope=_prefixed(h0, f"{a}rope."),
        tokenizer_model=_str(h0, "tokenizer.ggml.model"),
        tokenizer_pre=_str(h0, "tokenizer.ggml.pre"),
        vocab_size=vocab_size,
        vocab_sha256=vocab_sha256(h0, known=(leader[0], leader[1].vocab_sha256) if leader else None),
        bos_token_id=_int(h0, "tokenizer.ggml.bos_token_id"),
        eos_token_id=_int(h0, "tokenizer.ggml.eos_token_id"),
        chat_template=template,
        chat_template_sha256=chat_template_sha256(template) if template is not None else None,
        chat_templates=templates,
        base_models=_base_models(h0),
        source=_prefixed(h0, "general.source."),
        tags=tuple(_string_list(h0, "general.tags")),
        languages=tuple(_string_list(h0, "general.languages")),
        datasets=_datasets(h0),
        description=_str(h0, "general.description"),
        kind=kind,
        modalities=_modalities(h0) if kind == "mmproj" else {},
        gguf_version=h0.version,
        endianness=h0.endianness,
        alignment=h0.alignment,
        tensor_count=len(tensors),
        kv_count=h0.kv_count,
        header_bytes=sum(h.data_offset for h in ordered),
        file_size=sum(s for s in sizes if s is not None) if all(s is not None for s in sizes) else None,
        split=split,
        shard_count=len(ordered),
        metadata=_metadata(h0),
        kv_cache=kv_cache(h0) if kind == "model" else None,
        memory_profile=memory_profile(h0, tensors) if kind == "model" else None,
    )
