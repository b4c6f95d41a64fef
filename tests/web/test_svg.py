"""The server-drawn SVG, parsed as XML: structure, bounds, accessibility, escaping."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass

import pytest

from registry.responses import QuantMixEntry
from registry.web import svg

NS = "{http://www.w3.org/2000/svg}"
HOSTILE = '"><script>window.pwned=1</script><a href="javascript:alert(1)">&amp;'


def parse(markup: str) -> ET.Element:
    return ET.fromstring(str(markup))


def luminance(hex_colour: str) -> float:
    def channel(c: int) -> float:
        v = c / 255
        return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4

    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b)


def contrast(a: str, b: str) -> float:
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def no_script_or_external(root: ET.Element) -> None:
    for el in root.iter():
        assert el.tag not in (f"{NS}script", f"{NS}foreignObject", f"{NS}style", f"{NS}image", f"{NS}use")
        for name, value in el.attrib.items():
            assert not name.startswith("on"), (el.tag, name)
            if name in ("href", "{http://www.w3.org/1999/xlink}href"):
                assert value.startswith("/") and not value.startswith("//"), value


def accessible(root: ET.Element, role: str = "img") -> tuple[str, str]:
    assert root.get("role") == role
    title_id, desc_id = root.get("aria-labelledby", "").split()
    title = root.find(f"{NS}title")
    desc = root.find(f"{NS}desc")
    assert title is not None and title.get("id") == title_id and title.text
    assert desc is not None and desc.get("id") == desc_id and desc.text
    return title.text, desc.text


def mix(*rows: tuple[str, int, int]) -> list[QuantMixEntry]:
    return [QuantMixEntry(tensor_type=t, tensors=n, elements=b * 2, bytes=b) for t, n, b in rows]


def test_quant_mix_segments_share_the_width_by_bytes() -> None:
    root = parse(svg.quant_mix(mix(("Q4_K", 100, 600), ("Q6_K", 20, 300), ("F32", 50, 100)), width=1000))
    _, desc = accessible(root)
    assert desc == "Q4_K 60.0%, Q6_K 30.0%, F32 10.0%"
    bar = [r for r in root.findall(f"{NS}rect") if r.find(f"{NS}title") is not None]
    assert [float(r.get("width", "")) for r in bar] == [600, 300, 100]
    assert [float(r.get("x", "")) for r in bar] == [0, 600, 900]
    titles = [r.findtext(f"{NS}title") for r in bar]
    assert titles[0] == "Q4_K: 60.0% of bytes, 600 B, 100 tensors"
    legend = [t.text for t in root.findall(f"{NS}text")]
    assert legend[1:] == ["Q4_K · 60.0% · 600 B · 100", "Q6_K · 30.0% · 300 B · 20", "F32 · 10.0% · 100 B · 50"]
    no_script_or_external(root)


def test_quant_mix_bounds_its_segments_and_lists_every_type() -> None:
    rows = [(f"T{i}", 1, 1000 - i) for i in range(40)]
    root = parse(svg.quant_mix(mix(*rows)))
    bar = [r for r in root.findall(f"{NS}rect") if r.find(f"{NS}title") is not None]
    assert len(bar) == svg.MAX_SEGMENTS
    other = bar[-1].findtext(f"{NS}title") or ""
    assert other.startswith(f"{40 - svg.MAX_SEGMENTS + 1} other types")
    assert sum(float(r.get("width", "")) for r in bar) == pytest.approx(640, abs=0.5)
    assert len(root.findall(f"{NS}text")) == 41  # heading + every type
    assert float(root.get("viewBox", "").split()[3]) < 1000


def test_quant_mix_of_nothing_is_empty() -> None:
    assert svg.quant_mix([]) == ""
    assert svg.quant_mix(mix(("F32", 3, 0))) == ""


def test_quant_mix_escapes_hostile_type_names() -> None:
    root = parse(svg.quant_mix(mix((HOSTILE, 1, 10), ("Q8_0", 1, 10)), id_prefix='x" onload="y'))
    no_script_or_external(root)
    assert HOSTILE in (root.findtext(f"{NS}desc") or "")
    assert any(HOSTILE in (r.findtext(f"{NS}title") or "") for r in root.findall(f"{NS}rect"))


def test_palette_contrast_against_the_page() -> None:
    for colour in (*svg.PALETTE, svg.OTHER_COLOUR, *(c for c, _ in svg.EDGE_STYLE.values())):
        assert contrast(colour, "#ffffff") >= 3.0, colour
    assert contrast(svg.TEXT_COLOUR, "#ffffff") >= 7.0


def node(name: str, in_catalog: bool = True) -> svg.Node:
    return svg.Node(key=name.lower(), label=name, href=f"/repos/{name}", in_catalog=in_catalog)


def links(root: ET.Element) -> dict[str, ET.Element]:
    return {a.get("href", ""): a for a in root.iter(f"{NS}a")}


def test_lineage_graph_layers_ancestors_above_and_descendants_below() -> None:
    focus = node("org/focus")
    base = node("meta/base", in_catalog=False)
    kids = [node(f"q/k{i}") for i in range(3)]
    grandkid = node("q/gk")
    tree = svg.Tree(
        focus=focus,
        ancestors=[svg.Layer([base])],
        descendants=[svg.Layer(kids), svg.Layer([grandkid])],
        edges=[svg.Edge(focus.key, base.key, "finetune", ("card", "tags")),
               *(svg.Edge(k.key, focus.key, "quantized", ("gguf",)) for k in kids),
               svg.Edge(grandkid.key, kids[0].key, "adapter", ("tags",))],
    )  # fmt: skip
    root = parse(svg.lineage_graph(tree))
    title, _ = accessible(root, "group")  # its links must stay reachable: not an img
    assert title == "Model tree of org/focus"
    no_script_or_external(root)
    a = links(root)
    assert set(a) == {"/repos/org/focus", "/repos/meta/base", "/repos/q/k0", "/repos/q/k1", "/repos/q/k2", "/repos/q/gk"}

    def top(href: str) -> float:
        rect = a[href].find(f"{NS}rect")
        assert rect is not None
        return float(rect.get("y", ""))

    assert top("/repos/meta/base") < top("/repos/org/focus") < top("/repos/q/k0") < top("/repos/q/gk")
    assert top("/repos/q/k0") == top("/repos/q/k2")
    assert a["/repos/meta/base"].findtext(f"{NS}title") == "meta/base (not in catalog)"
    edges = root.findall(f"{NS}g[@class='tree-edge']")
    assert len(edges) == 5
    hover = [g.findtext(f"{NS}title") for g in edges]
    assert "org/focus: finetune of meta/base (source: model card, hub tags)" in hover
    assert "q/gk: adapter of q/k0 (source: hub tags)" in hover
    assert sorted(g.findtext(f"{NS}text") or "" for g in edges) == ["adapter", "finetune", *["quantized"] * 3]
    # Every edge runs from the bottom of the parent's box to the top of the child's.
    width, height = (float(v) for v in root.get("viewBox", "").split()[2:])
    for g in edges:
        line = g.find(f"{NS}line")
        assert line is not None
        assert 0 <= float(line.get("x1", "")) <= width and 0 <= float(line.get("y2", "")) <= height
        assert float(line.get("y1", "")) < float(line.get("y2", ""))


def test_lineage_graph_is_bounded_and_links_the_rest() -> None:
    focus = node("org/focus")
    kids = [node(f"q/k{i}") for i in range(svg.TREE_WIDTH + 5)]
    layers = [svg.Layer(kids, more=1234, more_href="/tree/org/focus/more?side=descendants&level=1")]
    layers += [svg.Layer([node(f"d/l{d}")]) for d in range(2, svg.TREE_DEPTH + 4)]
    root = parse(svg.lineage_graph(svg.Tree(focus=focus, descendants=layers)))
    a = links(root)
    assert sum(href.startswith("/repos/q/") for href in a) == svg.TREE_WIDTH
    assert sum(href.startswith("/repos/d/") for href in a) == svg.TREE_DEPTH - 1
    more = a["/tree/org/focus/more?side=descendants&level=1"]
    assert more.findtext(f"{NS}title") == "1234 more"
    width = float(root.get("width", ""))
    assert width <= (svg.TREE_WIDTH + 1) * (svg.NODE_W + svg.GAP_X) + 2 * svg.MARGIN
    for rect in root.iter(f"{NS}rect"):
        assert float(rect.get("x", "")) >= 0 and float(rect.get("x", "")) + svg.NODE_W <= width


def test_lineage_graph_escapes_hostile_names_and_refuses_outside_links() -> None:
    focus = node("org/focus")
    evil = svg.Node(key="e/x", label=HOSTILE, href="/repos/e/%22%3E")
    root = parse(svg.lineage_graph(svg.Tree(focus=focus, descendants=[svg.Layer([evil])],
                                            edges=[svg.Edge("e/x", focus.key, HOSTILE, (HOSTILE,))])))  # fmt: skip
    no_script_or_external(root)
    assert links(root)["/repos/e/%22%3E"].findtext(f"{NS}title") == HOSTILE
    edge = root.find(f"{NS}g[@class='tree-edge']")
    assert edge is not None and HOSTILE in (edge.findtext(f"{NS}title") or "")
    for href in ("javascript:alert(1)", "//evil.example/x", "https://evil.example/", "/\\evil", "/a b"):
        bad = svg.Node(key="b/b", label="b/b", href=href)
        with pytest.raises(ValueError, match="not a path on this site"):
            svg.lineage_graph(svg.Tree(focus=bad))


@dataclass
class Row:
    tensor_type: str
    tensors: int
    bytes: int


def test_quant_mix_takes_any_row_with_the_three_fields() -> None:
    root = parse(svg.quant_mix([Row("Q4_K", 1, 3), Row("F16", 1, 1)]))
    assert root.findtext(f"{NS}desc") == "Q4_K 75.0%, F16 25.0%"
