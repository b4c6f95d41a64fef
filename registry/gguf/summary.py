"""Rendering of an artifact's facts and headers for people (text) and programs (JSON).

Used by `registry inspect`. Pure functions from `Facts` and parsed headers to a string or
a JSON-ready dict; no I/O.

Tensor offsets are absolute byte offsets in their file (where the data really is);
`header_bytes` says where the data section starts, for the relative offset.

Chat template safety findings are computed by the caller (this layer does not render
or analyse templates) and passed in as their JSON form, worst first; None means the
templates were not scanned.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Collection, Mapping, Sequence
from functools import cache
from typing import Any

from registry.gguf.facts_model import Facts, QuantMixEntry
from registry.gguf.memory_profile import MemoryProfile
from registry.gguf.model import GGUFHeader


def tensor_rows(headers: Sequence[GGUFHeader]) -> list[dict[str, Any]]:
    """One dict per tensor over all shards, in file order; `shard` (1-based) when split."""
    split = len(headers) > 1
    rows = []
    for shard, h in enumerate(headers, start=1):
        for t in h.tensors:
            row: dict[str, Any] = {
                "name": t.name,
                "type": t.type.name,
                "shape": list(t.shape),
                "offset": t.file_offset,
                "n_bytes": t.n_bytes,
            }
            if split:
                row["shard"] = shard
            rows.append(row)
    return rows


def facts_json(
    facts: Facts,
    headers: Sequence[GGUFHeader],
    *,
    tensors: bool = False,
    paths: Sequence[str] | None = None,
    template_findings: Sequence[Mapping[str, Any]] | None = None,
    context: int | None = None,
    template_capabilities: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Every fact as one JSON-ready object, plus the files and (optionally) the tensors.

    `chat_template_findings` is always present: a list ([] when clean or without a
    template), or null when not scanned; so is `chat_template_capabilities` (what the
    templates can do; null when not probed). With `context`, `kv_cache.at_context` is the
    cache for that many tokens."""
    out: dict[str, Any] = {}
    if paths is not None:
        out["path"] = paths[0]
        out["files"] = [
            {"path": p, "file_size": h.file_size, "header_bytes": h.data_offset}
            for p, h in zip(paths, headers, strict=True)
        ]
    out.update(facts.to_dict())
    if context is not None and facts.kv_cache is not None:
        out["kv_cache"]["at_context"] = {"tokens": context, "bytes": facts.kv_cache.bytes_at(context)}
    out["chat_template_findings"] = (
        None if template_findings is None else [dict(f) for f in template_findings]
    )
    out["chat_template_capabilities"] = None if template_capabilities is None else list(template_capabilities)
    if tensors:
        out["tensors"] = tensor_rows(headers)
    return out


# -- back from JSON ----------------------------------------------------------------------------

_UNFIT = object()  # a stored value that does not fit its field: the field keeps its default


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _fit(value: Any, hint: Any) -> Any:
    """`value` (decoded JSON) as the type `hint` names, or _UNFIT."""
    if hint is Any:
        return value
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    for option in options:
        origin = typing.get_origin(option) or option
        if option is type(None):
            if value is None:
                return None
        elif origin in (int, float, str):
            if isinstance(value, bool) or not isinstance(value, int | float | str):
                continue
            if isinstance(value, origin) or (origin is float and isinstance(value, int)):
                return origin(value)
        elif origin is dict:
            if isinstance(value, Mapping):
                return dict(value)
        elif origin is tuple:
            if isinstance(value, list | tuple):
                item = typing.get_args(option)[0]
                fitted = [_fit(v, item) for v in value]
                return tuple(v for v in fitted if v is not _UNFIT)
        elif dataclasses.is_dataclass(origin) and isinstance(value, Mapping):
            return _from_json(origin, value)
    return _UNFIT


def _from_json(cls: Any, values: Mapping[str, Any]) -> Any:
    """An instance of the dataclass `cls` from its JSON form: each field that is present and
    of its type; others keep their defaults (_UNFIT when a field without one is left)."""
    hints = _hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in values and (value := _fit(values[f.name], hints[f.name])) is not _UNFIT:
            kwargs[f.name] = value
    try:
        return cls(**kwargs)
    except TypeError:  # a required field missing or unfit
        return _UNFIT


def facts_from_json(
    values: Mapping[str, Any],
    *,
    quant_mix: Sequence[Mapping[str, Any]] = (),
    chat_template: Any = None,
    chat_templates: Any = None,
) -> Facts:
    """`Facts` back from a catalog page: its `facts` object, `quant_mix` list and chat
    templates. A value the catalog stored in another shape (an older version's, or one
    cut short) leaves its field at the default instead of failing."""
    data = {k: v for k, v in values.items()
            if k not in ("quant_mix", "chat_template", "chat_templates", "memory_profile")}  # fmt: skip
    data["chat_template"] = chat_template
    data["chat_templates"] = chat_templates if isinstance(chat_templates, Mapping) else {}
    facts = _from_json(Facts, data)
    if facts is _UNFIT:
        facts = Facts()
    mix = {}
    for entry in quant_mix:
        if not isinstance(entry, Mapping):
            continue
        counts = [entry.get(k) for k in ("tensors", "elements", "bytes")]
        if isinstance(entry.get("tensor_type"), str) and all(type(c) is int for c in counts):
            mix[entry["tensor_type"]] = QuantMixEntry(*(int(c or 0) for c in counts))
    return dataclasses.replace(facts, quant_mix=mix, memory_profile=_memory_profile(values.get("memory_profile")))


def _memory_profile(value: Any) -> MemoryProfile | None:
    """A memory profile as `to_dict` wrote it; None for any other shape."""
    if not isinstance(value, Mapping):
        return None
    try:
        return MemoryProfile.from_dict(value)
    except (KeyError, TypeError, ValueError):
        return None


# -- text ------------------------------------------------------------------------------------

# C0 and C1 control characters and DEL, written as escapes: a file's strings reach a
# terminal through `registry inspect`, where escape sequences in a tag or a tensor name
# could erase the template safety line above them or set the clipboard.
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))}


def visible(text: str) -> str:
    return text.translate(_CONTROLS)


def _n(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _short(n_bytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.1f} {unit}"
    return f"{n_bytes:,} bytes"


def _size(n_bytes: int | None) -> str:
    if n_bytes is None:
        return "unknown size"
    short = _short(n_bytes)
    return short if short.endswith(" bytes") else f"{short} ({n_bytes:,} bytes)"


def kv_cache_text(f: Facts, context: int | None = None) -> str | None:
    """`f16, 3.0 KiB per token in 3 layers + 15 sliding-window layers (512 tokens) 15.0 KiB
    per token; 103.5 MiB at 32,768 tokens`, and first the size at `context` tokens when
    given: None when not estimated."""
    kv = f.kv_cache
    if kv is None:
        return None
    parts = []
    if kv.layers:
        parts.append(f"{_short(kv.bytes_per_token)} per token in {kv.layers} layers")
    if kv.swa_layers:
        parts.append(f"{kv.swa_layers} sliding-window layers ({kv.sliding_window:,} tokens) "
                     f"{_short(kv.swa_bytes_per_token)} per token")  # fmt: skip
    text = "f16, " + " + ".join(parts)
    if context is not None:
        text += f"; {_short(kv.bytes_at(context))} at {context:,} tokens"
    if kv.at_context_length is not None and f.context_length and f.context_length != context:
        text += f"; {_short(kv.at_context_length)} at {f.context_length:,} tokens"
    if kv.recurrent_layers:
        text += f"; and {kv.recurrent_layers} recurrent layers of a fixed-size state (not counted)"
    return text


def table(header: Sequence[str], rows: Sequence[Sequence[str]], right: Collection[int] = ()) -> list[str]:
    """Aligned columns (those in `right` to the right), two spaces apart, indented two; the
    cells' control characters written out (`visible`)."""
    rows = [[visible(c) for c in r] for r in rows]
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=False)]

    def fmt(cells: Sequence[str]) -> str:
        parts = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  " + "  ".join(parts).rstrip()

    return [fmt(header), *(fmt(r) for r in rows)]


def label_lines(pairs: Sequence[tuple[str, str]]) -> list[str]:
    """`  label  value` lines, the values aligned, their control characters written out
    (`visible`); a pair without a value is left out."""
    shown = [(label, visible(value)) for label, value in pairs if value]
    width = max((len(label) for label, _ in shown), default=0)
    return [f"  {label.ljust(width)}  {value}" for label, value in shown]


def template_verdict(findings: Sequence[Mapping[str, Any]] | None) -> str:
    """One line on the chat templates' safety; `findings` worst first, None: not scanned."""
    if findings is None:
        return "not scanned"
    if not findings:
        return "clean (no findings)"
    worst = findings[0]
    more = f" (+{len(findings) - 1} more)" if len(findings) > 1 else ""
    return f"{str(worst['severity']).upper()}: {worst['code']}: {worst.get('message', '')}{more}"


def _lines(
    facts: Facts,
    template_findings: Sequence[Mapping[str, Any]] | None = None,
    context: int | None = None,
    template_capabilities: Sequence[str] | None = None,
) -> list[tuple[str, str]]:
    f = facts
    lines: list[tuple[str, str]] = []

    def add(label: str, value: str | None) -> None:
        if value:
            lines.append((label, visible(value)))

    add("name", f.name)
    add("architecture", f.architecture)
    add("kind", f.kind if f.kind != "model" else None)
    if f.kind == "mmproj":
        inputs = [f"{m} ({kind})" if kind else m for m, kind in f.modalities.items()]
        add("takes in", ", ".join(inputs) or "nothing: it declares no vision or audio encoder")
    add("basename", f.basename)
    add("finetune", f.finetune)
    add("version", f.version)
    size = f.size_label or "-"
    if f.size_label and f.size_label_source == "computed":
        size += " (computed)"
    add("size", f"{size}, {f.parameter_count:,} parameters")
    if f.file_type:
        bpw = f", {f.bits_per_weight:.2f} bits per weight" if f.bits_per_weight is not None else ""
        source = " (inferred from tensor types)" if f.file_type_source == "inferred" else ""
        add("file type", f"{f.file_type}{source}{bpw}")
    lic = ", ".join(x for x in (f.license, f.license_name, f.license_link) if x)
    add("license", lic)
    if f.context_length is not None:
        add("context", f"{f.context_length:,} tokens")
    shape = [
        f"{f.block_count} blocks" if f.block_count is not None else "",
        f"embedding {f.embedding_length:,}" if f.embedding_length is not None else "",
        f"feed forward {f.feed_forward_length:,}" if f.feed_forward_length is not None else "",
    ]
    add("layers", ", ".join(s for s in shape if s))
    if f.head_count is not None:
        kv = f", {f.head_count_kv} KV heads" if f.head_count_kv is not None else ""
        add("attention", f"{f.head_count} heads{kv}")
    add("KV cache", kv_cache_text(f, context))
    if f.expert_count:
        used = f", {f.expert_used_count} used per token" if f.expert_used_count else ""
        add("experts", f"{f.expert_count}{used}")
    add("rope", ", ".join(f"{k}={v}" for k, v in f.rope.items() if not isinstance(v, list | dict)))
    if f.tokenizer_model:
        parts = [f.tokenizer_model + (f" (pre: {f.tokenizer_pre})" if f.tokenizer_pre else "")]
        if f.vocab_size is not None:
            parts.append(f"{f.vocab_size:,} tokens")
        if f.bos_token_id is not None:
            parts.append(f"bos {f.bos_token_id}")
        if f.eos_token_id is not None:
            parts.append(f"eos {f.eos_token_id}")
        add("tokenizer", ", ".join(parts))
    if f.vocab_sha256 is not None:
        add("vocab key", f"sha256 {f.vocab_sha256} (draft models share it)")
    if f.chat_template is not None:
        add("chat template", f"sha256 {f.chat_template_sha256} ({len(f.chat_template):,} chars)")
    for name in f.chat_templates:
        add("", f"+ named template {name!r}")
    if f.chat_template is not None or f.chat_templates:
        add("template safety", template_verdict(template_findings))
        if template_capabilities is not None:
            add("template can do", ", ".join(template_capabilities) or "none of the probed capabilities")
    for i, bm in enumerate(f.base_models):
        desc = bm.repo_id or bm.name or "?"
        extra = [x for x in (bm.name if bm.repo_id else None, bm.version, bm.repo_url) if x]
        add("base model" if i == 0 else "", desc + (f"  ({', '.join(extra)})" if extra else ""))
    add("tags", ", ".join(f.tags))
    add("languages", ", ".join(f.languages))
    add("datasets", ", ".join(f.datasets))
    if f.split is not None:
        add("split", f"{f.shard_count} shards, {f.split.tensors_count:,} tensors in all")
    add("file size", _size(f.file_size))
    add(
        "GGUF",
        f"v{f.gguf_version}, {f.endianness}-endian, alignment {f.alignment}, "
        f"{f.tensor_count:,} tensors, {f.kv_count:,} keys, header {_size(f.header_bytes)}",
    )
    return lines


def facts_text(
    facts: Facts,
    headers: Sequence[GGUFHeader],
    *,
    title: str | None = None,
    tensors: bool = False,
    template_findings: Sequence[Mapping[str, Any]] | None = None,
    context: int | None = None,
    template_capabilities: Sequence[str] | None = None,
    more: Sequence[tuple[str, str]] = (),
) -> str:
    """A readable summary: the facts, the quant mix table and optionally every tensor.
    With `context`, the KV cache line also says its size for that many tokens. `more` are
    (label, value) lines to show after the facts' own, aligned with them."""
    out: list[str] = []
    if title:
        out.append(title)
    out += label_lines([*_lines(facts, template_findings, context, template_capabilities), *more])

    if facts.quant_mix:
        total = sum(e.bytes for e in facts.quant_mix.values()) or 1
        rows = [
            [name, _n(e.tensors), _n(e.elements), _n(e.bytes), f"{100 * e.bytes / total:.1f}%"]
            for name, e in facts.quant_mix.items()
        ]
        out += [
            "",
            "quant mix",
            *table(["type", "tensors", "elements", "bytes", "share"], rows, {1, 2, 3, 4}),
        ]

    if tensors:
        rows = []
        for row in tensor_rows(headers):
            shape = "x".join(str(d) for d in row["shape"])
            cells = [row["name"], row["type"], shape, _n(row["n_bytes"]), _n(row["offset"])]
            if "shard" in row:
                cells.append(str(row["shard"]))
            rows.append(cells)
        head = ["name", "type", "shape", "bytes", "offset"] + (["shard"] if len(headers) > 1 else [])
        out += ["", f"tensors ({len(rows):,})", *table(head, rows, {3, 4, 5})]
    return "\n".join(out) + "\n"
