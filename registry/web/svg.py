"""Server-drawn SVG: the quant mix of an artifact and the model tree around a repo.

Pure functions from data to markup: no I/O, every string from a file, a card or a hub
escaped (`markupsafe.escape`), no script, no style element, no reference outside the page
but the `href`s given, which must be paths on this site. Each drawing is an accessible
image labelled by its own `<title>` and `<desc>` (`role="img"`; the model tree, whose nodes
are links a keyboard reaches, `role="group"`), and a `<title>` per part that a pointer shows
on hover.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from markupsafe import Markup, escape

# The model tree's bounds: layers drawn each way from the focus repo, and repos drawn per
# layer before a "N more" node stands for the rest. The tree page reads no more than this.
TREE_DEPTH = 3
TREE_WIDTH = 8

# Segment colours, each at least 3:1 against the white page (WCAG's contrast for graphics)
# and told apart by the legend's text too, not by colour alone.
PALETTE = ("#1f4e9c", "#b3401b", "#1d7a4c", "#7a3d9a", "#8a6100", "#0e6f7a", "#a3245f", "#4d5d1f",
           "#595959", "#2e3a8c", "#7c4a1e", "#006d5b")  # fmt: skip
OTHER_COLOUR = "#6b6b6b"
TEXT_COLOUR = "#1a1a1a"
EDGE_STYLE = {  # relation -> (stroke colour, dash pattern): told apart without colour too
    "quantized": ("#1f4e9c", ""),
    "finetune": ("#1d7a4c", "6 3"),
    "adapter": ("#7a3d9a", "2 3"),
    "merge": ("#b3401b", "8 3 2 3"),
    "unknown": ("#595959", "1 4"),
}
SOURCE_NAMES = {"gguf": "GGUF keys", "card": "model card", "tags": "hub tags"}
# Types beyond this many in one bar are drawn as one "other" segment (the legend lists them all).
MAX_SEGMENTS = len(PALETTE)


class MixEntry(Protocol):
    """What a quant mix row offers (`responses.QuantMixEntry`, a catalog row)."""

    @property
    def tensor_type(self) -> str: ...
    @property
    def tensors(self) -> int: ...
    @property
    def bytes(self) -> int: ...


def _internal(href: str) -> str:
    """A path on this site: a link drawn from hub data must never leave it or run script."""
    if not href.startswith("/") or href.startswith("//") or "\\" in href or any(ord(c) < 33 for c in href):
        raise ValueError(f"not a path on this site: {href!r}")
    return href


def _n(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".")


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _percent(share: float) -> str:
    return f"{share * 100:.1f}%" if share >= 0.001 else "<0.1%"


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    raise AssertionError


def quant_mix(entries: Iterable[MixEntry], *, id_prefix: str = "mix", width: int = 640) -> Markup:
    """The share of bytes per ggml type as one stacked bar and a legend under it, largest
    type first. Empty when no entry has bytes."""
    rows = sorted((e for e in entries if e.bytes > 0), key=lambda e: (-e.bytes, e.tensor_type))
    total = sum(e.bytes for e in rows)
    if not total:
        return Markup("")
    shown = rows[: MAX_SEGMENTS - 1] if len(rows) > MAX_SEGMENTS else rows
    rest = rows[len(shown) :]
    pid = escape(id_prefix)
    bar_h, row_h, top = 28, 20, 8
    legend_top = top + bar_h + 14
    height = legend_top + row_h * (len(rows) + 1)
    summary = ", ".join(f"{e.tensor_type} {_percent(e.bytes / total)}" for e in rows)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="quant-mix" role="img" width="100%" '
        f'viewBox="0 0 {width} {height}" aria-labelledby="{pid}-title {pid}-desc">',
        f'<title id="{pid}-title">Quantization mix: share of bytes per tensor type</title>',
        f'<desc id="{pid}-desc">{escape(summary)}</desc>',
    ]
    x = 0.0
    segments = [(e.tensor_type, e.tensors, e.bytes, colour) for e, colour in zip(shown, PALETTE, strict=False)]
    if rest:
        segments.append((f"{len(rest)} other types", sum(e.tensors for e in rest), sum(e.bytes for e in rest),
                         OTHER_COLOUR))  # fmt: skip
    for name, tensors, size, colour in segments:
        w = width * size / total
        out.append(
            f'<rect x="{_n(x)}" y="{top}" width="{_n(max(w, 0.5))}" height="{bar_h}" fill="{colour}" '
            f'stroke="#ffffff" stroke-width="1"><title>{escape(name)}: {escape(_percent(size / total))} of bytes, '
            f"{_bytes(size)}, {tensors} tensors</title></rect>"
        )
        x += w
    colours = {name: colour for name, _, _, colour in segments}
    y = legend_top
    out.append(f'<text x="0" y="{y}" font-size="13" font-weight="bold" fill="{TEXT_COLOUR}">'
               "type · share of bytes · size · tensors</text>")  # fmt: skip
    for e in rows:
        y += row_h
        colour = colours.get(e.tensor_type, OTHER_COLOUR)
        out.append(
            f'<rect x="0" y="{y - 11}" width="12" height="12" fill="{colour}"/>'
            f'<text x="18" y="{y}" font-size="13" fill="{TEXT_COLOUR}">{escape(_clip(e.tensor_type, 24))} · '
            f"{escape(_percent(e.bytes / total))} · {_bytes(e.bytes)} · {e.tensors}</text>"
        )
    out.append("</svg>")
    return Markup("".join(out))


def memory_parts(bars: Sequence[tuple[str, Sequence[tuple[str, int]]]], *, id_prefix: str = "memory",
                 width: int = 640) -> Markup:  # fmt: skip
    """What llama.cpp allocates as stacked bars on one scale, one per way of running it
    (`bars`: a label and its (part, bytes)), the parts in one colour each across bars and
    a legend under them. Empty when nothing has bytes."""
    largest = max((sum(n for _, n in parts) for _, parts in bars), default=0)
    if not largest:
        return Markup("")
    names = list(dict.fromkeys(name for _, parts in bars for name, n in parts if n > 0))
    colours = dict(zip(names, PALETTE, strict=False))
    pid = escape(id_prefix)
    label_w, bar_h, gap, top = 150, 24, 10, 6
    legend_y = top + len(bars) * (bar_h + gap) + 14
    height = legend_y + 8
    summary = "; ".join(f"{label}: " + ", ".join(f"{name} {_bytes(n)}" for name, n in parts if n > 0)
                        for label, parts in bars)  # fmt: skip
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="memory-parts" role="img" width="100%" '
        f'viewBox="0 0 {width} {height}" aria-labelledby="{pid}-title {pid}-desc">',
        f'<title id="{pid}-title">Memory by part</title>',
        f'<desc id="{pid}-desc">{escape(summary)}</desc>',
    ]
    scale = (width - label_w) / largest
    for i, (label, parts) in enumerate(bars):
        y = top + i * (bar_h + gap)
        out.append(f'<text x="0" y="{y + bar_h - 7}" font-size="13" fill="{TEXT_COLOUR}">{escape(_clip(label, 20))}</text>')
        x = float(label_w)
        for name, n in parts:
            if n <= 0:
                continue
            w = n * scale
            out.append(
                f'<rect x="{_n(x)}" y="{y}" width="{_n(max(w, 0.5))}" height="{bar_h}" fill="{colours.get(name, OTHER_COLOUR)}" '
                f'stroke="#ffffff" stroke-width="1"><title>{escape(label)}: {escape(name)} {_bytes(n)}</title></rect>'
            )
            x += w
    x = 0.0
    for name in names:
        out.append(f'<rect x="{_n(x)}" y="{legend_y - 11}" width="12" height="12" fill="{colours.get(name, OTHER_COLOUR)}"/>'
                   f'<text x="{_n(x + 16)}" y="{legend_y}" font-size="13" fill="{TEXT_COLOUR}">{escape(name)}</text>')  # fmt: skip
        x += 16 + 8 * len(name) + 14
    out.append("</svg>")
    return Markup("".join(out))


# The model tree.


@dataclass(frozen=True)
class Node:
    """A repo drawn in the tree; `key` is its `repo_key` (one node per repo, whatever the case)."""

    key: str
    label: str
    href: str
    in_catalog: bool = True


@dataclass(frozen=True)
class Edge:
    """`child` was made from `parent` (node keys), by `relation`, as `sources` say."""

    child: str
    parent: str
    relation: str
    sources: tuple[str, ...]


@dataclass(frozen=True)
class Layer:
    """The repos at one distance from the focus, and how many more there are beyond them
    (`more`), listed at `more_href`."""

    nodes: Sequence[Node]
    more: int = 0
    more_href: str | None = None


@dataclass(frozen=True)
class Tree:
    """The focus repo, its ancestors' and descendants' layers (nearest first) and the edges
    between drawn nodes."""

    focus: Node
    ancestors: Sequence[Layer] = ()
    descendants: Sequence[Layer] = ()
    edges: Sequence[Edge] = field(default_factory=tuple)


NODE_W, NODE_H, GAP_X, GAP_Y, MARGIN = 190, 34, 14, 64, 10
LABEL_CHARS = 26


def _node_box(x: float, y: float, node: Node, focus: bool) -> str:
    fill = "#fff4d6" if focus else ("#ffffff" if node.in_catalog else "#f0f0f0")
    stroke = TEXT_COLOUR if focus else "#4a4a4a"
    note = "" if node.in_catalog else " (not in catalog)"
    dash = "" if node.in_catalog else ' stroke-dasharray="4 3"'
    weight = ' font-weight="bold"' if focus else ""
    return (
        f'<a href="{escape(_internal(node.href))}" class="tree-node">'
        f"<title>{escape(node.label)}{note}</title>"
        f'<rect x="{_n(x)}" y="{_n(y)}" width="{NODE_W}" height="{NODE_H}" rx="4" fill="{fill}" '
        f'stroke="{stroke}" stroke-width="{2 if focus else 1}"{dash}/>'
        f'<text x="{_n(x + NODE_W / 2)}" y="{_n(y + NODE_H / 2 + 4)}" text-anchor="middle" font-size="12" '
        f'fill="{TEXT_COLOUR}"{weight}>'
        f"{escape(_clip(node.label, LABEL_CHARS))}</text></a>"
    )


def _more_box(x: float, y: float, layer: Layer) -> str:
    text = f"{layer.more} more"
    box = (f'<rect x="{_n(x)}" y="{_n(y)}" width="{NODE_W}" height="{NODE_H}" rx="4" fill="#ffffff" '
           f'stroke="#4a4a4a" stroke-dasharray="2 2"/>'
           f'<text x="{_n(x + NODE_W / 2)}" y="{_n(y + NODE_H / 2 + 4)}" text-anchor="middle" font-size="12" '
           f'fill="{TEXT_COLOUR}" text-decoration="underline">{text}</text>')  # fmt: skip
    if layer.more_href is None:
        return f"<g><title>{text}</title>{box}</g>"
    return f'<a href="{escape(_internal(layer.more_href))}" class="tree-more"><title>{text}</title>{box}</a>'


def sources_text(sources: Iterable[str]) -> str:
    return ", ".join(SOURCE_NAMES.get(s, s) for s in sources)


def lineage_graph(tree: Tree, *, id_prefix: str = "tree") -> Markup:
    """Ancestors above the focus repo, descendants below it, one row per distance; an edge
    from each parent down to its child, labelled with its relation, its sources in a
    `<title>`. Layers beyond TREE_DEPTH and nodes beyond TREE_WIDTH a layer are not drawn
    (the caller counts them in a layer's `more`)."""
    ups = list(tree.ancestors)[:TREE_DEPTH]
    downs = list(tree.descendants)[:TREE_DEPTH]
    rows: list[tuple[list[Node], Layer | None]] = [
        *[(list(layer.nodes)[:TREE_WIDTH], layer) for layer in reversed(ups)],
        ([tree.focus], None),
        *[(list(layer.nodes)[:TREE_WIDTH], layer) for layer in downs],
    ]
    cells = [len(nodes) + (1 if layer is not None and layer.more else 0) for nodes, layer in rows]
    columns = max(cells)
    width = MARGIN * 2 + columns * NODE_W + (columns - 1) * GAP_X
    height = MARGIN * 2 + len(rows) * NODE_H + (len(rows) - 1) * GAP_Y
    where: dict[str, tuple[float, float]] = {}  # node key -> top-left corner
    boxes: list[str] = []
    for r, ((nodes, layer), n) in enumerate(zip(rows, cells, strict=True)):
        y = MARGIN + r * (NODE_H + GAP_Y)
        x0 = (width - (n * NODE_W + (n - 1) * GAP_X)) / 2
        for i, node in enumerate(nodes):
            x = x0 + i * (NODE_W + GAP_X)
            if node.key in where:
                continue  # drawn once, in the row nearest the focus
            where[node.key] = (x, y)
            boxes.append(_node_box(x, y, node, node is tree.focus))
        if layer is not None and layer.more:
            boxes.append(_more_box(x0 + len(nodes) * (NODE_W + GAP_X), y, layer))
    lines: list[str] = []
    labels = {n.key: n.label for n in itertools.chain.from_iterable(nodes for nodes, _ in rows)}
    for e in tree.edges:
        if e.child not in where or e.parent not in where or e.child == e.parent:
            continue
        (px, py), (cx, cy) = where[e.parent], where[e.child]
        if py == cy:
            continue  # a cycle within one layer: the list under the graph still has it
        # Parents are drawn above children in both halves: ancestors' rows over the focus.
        (x1, y1, x2, y2) = ((px + NODE_W / 2, py + NODE_H, cx + NODE_W / 2, cy) if py < cy
                            else (px + NODE_W / 2, py, cx + NODE_W / 2, cy + NODE_H))  # fmt: skip
        colour, dash = EDGE_STYLE.get(e.relation, EDGE_STYLE["unknown"])
        lx, ly = x1 + (x2 - x1) * 0.6, y1 + (y2 - y1) * 0.6
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        lines.append(
            f'<g class="tree-edge"><title>{escape(labels.get(e.child, e.child))}: {escape(e.relation)} of '
            f"{escape(labels.get(e.parent, e.parent))} (source: {escape(sources_text(e.sources))})</title>"
            f'<line x1="{_n(x1)}" y1="{_n(y1)}" x2="{_n(x2)}" y2="{_n(y2)}" stroke="{colour}" '
            f'stroke-width="1.5"{dash_attr}/>'
            f'<text x="{_n(lx)}" y="{_n(ly)}" text-anchor="middle" font-size="11" fill="{TEXT_COLOUR}" '
            f'paint-order="stroke" stroke="#ffffff" stroke-width="3">{escape(e.relation)}</text></g>'
        )
    pid = escape(id_prefix)
    desc = (f"{sum(len(n) for n, _ in rows[: len(ups)])} ancestors and "
            f"{sum(len(n) for n, _ in rows[len(ups) + 1:])} descendants drawn; the list below the graph "
            "names every edge and its source.")  # fmt: skip
    return Markup(
        f'<svg xmlns="http://www.w3.org/2000/svg" class="lineage-graph" role="group" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" aria-labelledby="{pid}-title {pid}-desc">'
        f'<title id="{pid}-title">Model tree of {escape(tree.focus.label)}</title>'
        f'<desc id="{pid}-desc">{escape(desc)}</desc>'
        + "".join(lines) + "".join(boxes) + "</svg>"
    )


__all__ = ["EDGE_STYLE", "PALETTE", "SOURCE_NAMES", "TREE_DEPTH", "TREE_WIDTH", "Edge", "Layer", "MixEntry",
           "Node", "Tree", "lineage_graph", "quant_mix", "sources_text"]  # fmt: skip
