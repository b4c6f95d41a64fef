"""The GGUF file naming convention, and the looser names files really have on a hub.

Three levels of trust:

* `parse_filename` follows the spec's convention
  `[<Sidecar>-]<BaseName>-<SizeLabel>[-<FineTune>]-<Version>[-<Encoding>][-<Type>][-<Shard>].gguf`
  (ggml docs/gguf.md, "GGUF Naming Convention") and returns None for anything else. Like
  the spec's reference regex it requires a size label and a version (without a version an
  encoding is easily mistaken for a fine-tune).
* `quant_label_from_filename` finds the quantization label in any name people actually
  use (`qwen2.5-1.5b-instruct-q5_k_m.gguf`, `Model.Q4_1.gguf`, `...-UD-Q4_K_XL.gguf`).
* `parse_shard` / `group_shards` recognise the `-NNNNN-of-NNNNN.gguf` suffix that
  llama.cpp's gguf-split writes and group a repo's files into artifacts.

Pure string functions; no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

SIDECARS = ("mmproj", "mtp")
FILE_TYPES = ("LoRA", "vocab")

_SHARD_RE = re.compile(r"^(?P<stem>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
# BaseName: the first token is any run of letters, digits and spaces; later tokens either
# start with a letter or are all digits ("Hermes-2-Pro-Llama-3"). So a token like "8B"
# or "3.8B" can never belong to the base name, which is what ends it.
_BASE_FIRST_RE = re.compile(r"[A-Za-z0-9\s]+")
_BASE_NEXT_RE = re.compile(r"[A-Za-z\s][A-Za-z0-9\s]*|[0-9\s]+")
_SIZE_RE = re.compile(r"(?:(?P<experts>\d+)x)?(?P<count>(?:\d+\.)?\d+)(?P<scale>[A-Za-z])")
# An extra size attribute joined to the size label: "3.8B-ContextLength4k".
_SIZE_ATTR_RE = re.compile(r"[A-Za-z]+(?:\d+\.)?\d+[A-Za-z]+")
_FINETUNE_RE = re.compile(r"[A-Za-z0-9\s]+")
_VERSION_RE = re.compile(r"v\d+(?:\.\d+)*")
_ENCODING_RE = re.compile(r"\w+", re.ASCII)


@dataclass(frozen=True, slots=True)
class GGUFFilename:
    """One file name split into the convention's components (all as written)."""

    basename: str
    size_label: str
    finetune: str | None
    version: str
    encoding: str | None = None
    type: str | None = None  # "LoRA" | "vocab" | None (a model)
    shard_index: int | None = None  # 1-based
    shard_count: int | None = None
    sidecar: str | None = None  # "mmproj" | "mtp" | None
    expert_count: int | None = None  # the N of an "NxM" size label


def parse_shard(name: str) -> tuple[str, int, int] | None:
    """`model-00002-of-00003.gguf` -> ("model", 2, 3); None when not a valid shard name.

    The index is 1-based, as gguf-split writes it; index 0 or an index past the count is
    not a shard name (and `-00000-of-00000` is not one either).
    """
    m = _SHARD_RE.match(name)
    if m is None:
        return None
    index, count = int(m["index"]), int(m["count"])
    if index < 1 or index > count:
        return None
    return m["stem"], index, count


def _split_suffixes(stem: str) -> tuple[str, str | None, tuple[int, int] | None]:
    """Strip the optional `-<Type>` and `-<Shard>` suffixes off a name without `.gguf`."""
    shard: tuple[int, int] | None = None
    m = re.fullmatch(r"(?P<rest>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})", stem)
    if m is not None:
        shard = (int(m["index"]), int(m["count"]))
        stem = m["rest"]
    file_type = None
    for t in FILE_TYPES:
        if stem.endswith("-" + t):
            file_type, stem = t, stem[: -len(t) - 1]
            break
    return stem, file_type, shard


def _match_prefix(tokens: list[str]) -> tuple[str, str, str | None, int | None] | None:
    """BaseName-SizeLabel[-FineTune] from the tokens before the version."""
    if not tokens or not _BASE_FIRST_RE.fullmatch(tokens[0]):
        return None
    end = 1
    while end < len(tokens) and _BASE_NEXT_RE.fullmatch(tokens[end]):
        end += 1
    basename = "-".join(tokens[:end])
    rest = tokens[end:]
    if not rest:
        return None
    size = _SIZE_RE.fullmatch(rest[0])
    if size is None:
        return None
    size_label, rest = rest[0], rest[1:]
    if rest and _SIZE_ATTR_RE.fullmatch(rest[0]):
        size_label, rest = f"{size_label}-{rest[0]}", rest[1:]
    if not all(_FINETUNE_RE.fullmatch(t) for t in rest):
        return None
    experts = int(size["experts"]) if size["experts"] else None
    return basename, size_label, "-".join(rest) or None, experts


def parse_filename(name: str) -> GGUFFilename | None:
    """Split a file name per the GGUF naming convention; None when it does not follow it.

    A directory part is ignored. Two deliberate differences from the spec's reference
    regex: it accepts an empty base name ("-7B-v1.0.gguf") and a shard numbered 00000 or
    past its total; both are rejected here (the spec's text says shards count from 00001).
    """
    name = name.rsplit("/", 1)[-1]
    if not name.endswith(".gguf"):
        return None
    stem = name[: -len(".gguf")]
    for sidecar in SIDECARS:
        if stem.startswith(sidecar + "-"):
            parsed = _parse_stem(stem[len(sidecar) + 1 :], sidecar)
            if parsed is not None:
                return parsed
            break  # "mtp-7B-v1.0": no sidecar after all, but a model named "mtp"
    return _parse_stem(stem, None)


def _parse_stem(stem: str, sidecar: str | None) -> GGUFFilename | None:
    stem, file_type, shard = _split_suffixes(stem)
    if shard is not None and not 1 <= shard[0] <= shard[1]:
        return None
    tokens = stem.split("-")
    # The version is the last token, or the one before a single encoding token. Trying the
    # last position first matches the reference regex, whose fine-tune part is greedy.
    for v in (len(tokens) - 1, len(tokens) - 2):
        if v < 1 or not _VERSION_RE.fullmatch(tokens[v]):
            continue
        encoding = tokens[v + 1] if v + 1 < len(tokens) else None
        if encoding is not None and (not _ENCODING_RE.fullmatch(encoding) or encoding.startswith(FILE_TYPES)):
            continue
        prefix = _match_prefix(tokens[:v])
        if prefix is None:
            continue
        basename, size_label, finetune, experts = prefix
        return GGUFFilename(
            basename=basename,
            size_label=size_label,
            finetune=finetune,
            version=tokens[v],
            encoding=encoding,
            type=file_type,
            shard_index=shard[0] if shard else None,
            shard_count=shard[1] if shard else None,
            sidecar=sidecar,
            expert_count=experts,
        )
    return None


# A quantization label as people write it in file names, matched against one token of the
# name. K-quant and i-quant recipes (Q4_K_M, IQ2_XXS, Q4_K_XL, Q4_0_4_4) all share the shape
# "Q<digit>" or "IQ<digit>" followed by "_"-joined parts; the float and FP4 types are listed.
_QUANT_TOKEN_RE = re.compile(
    r"(?:I?Q\d(?:_[A-Z0-9]+)+|TQ\d_\d|B?F(?:16|32|64)|FP(?:16|32)|MXFP4(?:_MOE)?|NVFP4)",
    re.IGNORECASE,
)
_FLOAT_ALIASES = {"FP16": "F16", "FP32": "F32"}


def normalise_quant_label(text: str) -> str:
    """A quantization label as `quant_label_from_filename` gives it: upper case, `FP16`
    written `F16`."""
    upper = text.upper()
    return _FLOAT_ALIASES.get(upper, upper)


def quant_label_from_filename(name: str) -> str | None:
    """The quantization label in a file name as found on hubs, upper-cased; None if none.

    `qwen2.5-1.5b-instruct-q5_k_m.gguf` -> "Q5_K_M", `SmolLM2.Q4_1.gguf` -> "Q4_1",
    `x-f16.gguf` -> "F16", `x-fp16.gguf` -> "F16".

    Unsloth's dynamic quants keep their prefix: `...-UD-Q4_K_XL.gguf` -> "UD-Q4_K_XL". A
    repo often carries both `Q4_K_M` and `UD-Q4_K_XL` files, which are different recipes
    over the same ggml types; dropping "UD-" would make them look alike in search facets.
    The ggml types themselves come from the header (`Facts.quant_mix`), not from here.
    """
    base = name.rsplit("/", 1)[-1]
    shard = parse_shard(base)
    stem = shard[0] if shard else base
    if stem.lower().endswith(".gguf"):
        stem = stem[: -len(".gguf")]
    tokens = re.split(r"[-.\s]", stem)
    # Scan from the end: the label is conventionally last, and a base name such as
    # "Q2-chat" should not win over the real label after it.
    for i in range(len(tokens) - 1, -1, -1):
        token = tokens[i]
        if not _QUANT_TOKEN_RE.fullmatch(token):
            continue
        label = normalise_quant_label(token)
        if i > 0 and tokens[i - 1].upper() == "UD":
            label = "UD-" + label
        return label
    return None


# Files beside the quants of a model that are not quants of it: projectors, LoRA adapters,
# importance matrices and draft (MTP) heads.
_NOT_A_QUANT_RE = re.compile(r"(?:^|[-_.])(?:mmproj|lora|adapter|imatrix|mtp)(?:[-_.]|$)", re.IGNORECASE)


def model_stem(path: str) -> str | None:
    """The path of a quantization without its quantization label (and shard suffix),
    lower-cased: the same for every quant of one model in one folder (`Qwen3-4B-Q4_K_M.gguf`,
    `Qwen3-4B-UD-Q8_0.gguf` and `Qwen3-4B-Q8_0-00001-of-00002.gguf` give `qwen3-4b`). None for
    shards 2..N of a split model (no vocabulary), a file without a label, and projectors,
    adapters, imatrix files and MTP heads."""
    folder, _, name = path.rpartition("/")
    if not name.lower().endswith(".gguf") or _NOT_A_QUANT_RE.search(name):
        return None
    shard = parse_shard(name)
    if shard is not None and shard[1] != 1:
        return None
    stem = shard[0] if shard is not None else name[: -len(".gguf")]
    tokens = re.split(r"([-.\s])", stem)
    words = tokens[::2]
    for i in range(len(words) - 1, -1, -1):
        if _QUANT_TOKEN_RE.fullmatch(words[i]):
            cut = i - 1 if i > 0 and words[i - 1].upper() == "UD" else i
            kept = "".join(tokens[: max(2 * cut - 1, 0)]) + "".join(tokens[2 * i + 1 :])
            return f"{folder}/{kept}".lower()
    return None


@dataclass(frozen=True, slots=True)
class ShardGroup:
    """One artifact's files: a single file (count 1) or the shards of a split model."""

    stem: str  # the path without `.gguf` and without the `-NNNNN-of-NNNNN` suffix
    paths: tuple[str, ...]  # ordered by shard index
    count: int  # shards the names say there should be (1 for a single file)
    indices: tuple[int, ...] = (1,)  # 1-based shard indices present, matching `paths`

    @property
    def is_split(self) -> bool:
        return self.count > 1 or self.paths[0] != self.stem + ".gguf"

    @property
    def complete(self) -> bool:
        return self.indices == tuple(range(1, self.count + 1))

    @property
    def missing(self) -> tuple[int, ...]:
        present = set(self.indices)
        return tuple(i for i in range(1, self.count + 1) if i not in present)

    def incomplete_reason(self) -> str:
        """Why an incomplete set cannot be read: how many shards are missing and the first
        few of them (a name may announce 99,999 shards; the reason stays one short line)."""
        missing = self.missing
        shown = ", ".join(map(str, missing[:5])) + (
            f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        )
        return f"split model incomplete: {len(missing)} of {self.count} shards missing: {shown}"


def group_shards(paths: Iterable[str]) -> list[ShardGroup]:
    """Group file paths into artifacts: single files, and complete or incomplete split sets.

    Paths not ending in `.gguf` (case-insensitive) are ignored; duplicates count once.
    Shards are grouped by stem and announced count, so `m-00001-of-00002.gguf` and
    `m-00001-of-00003.gguf` make two (incomplete) groups rather than one inconsistent one.
    Groups come out sorted by their first path.
    """
    singles: list[ShardGroup] = []
    shards: dict[tuple[str, int], dict[int, str]] = {}
    for path in dict.fromkeys(paths):
        if not path.lower().endswith(".gguf"):
            continue
        parsed = parse_shard(path)
        if parsed is None:
            singles.append(ShardGroup(stem=path[: -len(".gguf")], paths=(path,), count=1))
            continue
        stem, index, count = parsed
        shards.setdefault((stem, count), {})[index] = path
    groups = list(singles)
    for (stem, count), by_index in shards.items():
        indices = tuple(sorted(by_index))
        groups.append(
            ShardGroup(stem=stem, paths=tuple(by_index[i] for i in indices), count=count, indices=indices)
        )
    groups.sort(key=lambda g: (g.paths[0], g.count))
    return groups
