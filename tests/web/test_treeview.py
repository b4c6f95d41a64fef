"""The tree page's view: the catalog's bounded layers as the graph and the edge list, on
both databases through the read path, and a layer's rest paged to its end."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from urllib.parse import parse_qs, urlsplit

from registry.catalog.db import Database
from registry.catalog.readpath import ReadSession
from registry.web import svg, treeview
from tests.catalog.test_layers import family

NS = "{http://www.w3.org/2000/svg}"


async def test_tree_view_draws_bounded_layers_and_lists_every_drawn_edge(db: Database) -> None:
    await family(db)
    lean = ReadSession(db.reads)
    try:
        view = await treeview.tree_view(lean, "org/ft", True)
        pages = []
        href = view.tree.descendants[0].more_href
        while href is not None:
            after = parse_qs(urlsplit(href).query)["after"][0]
            page = await treeview.rest_page(lean, "org/ft", "descendants", 1, after)
            pages.append(page)
            href = page.next_href
    finally:
        await lean.close()
    down, up = view.tree.descendants, view.tree.ancestors
    assert [len(layer.nodes) for layer in down] == [svg.TREE_WIDTH, 3, 1]
    assert down[0].more == 31 - svg.TREE_WIDTH
    assert down[0].more_href == f"/tree/org/ft/more?side=descendants&level=1&after=q%2Fft-{svg.TREE_WIDTH - 1:02d}-gguf"
    assert [(n.label, n.in_catalog, n.href) for n in up[0].nodes] == [
        ("Base/Model", False, "/tree/Base/Model"),  # no page of its own: its tree
        ("org/other", True, "/repos/org/other"),
    ]
    listed = {(i.child.label, i.parent.label, i.relation, i.sources_text) for i in view.edges}
    assert ("org/ft", "Base/Model", "finetune", "GGUF keys") in listed
    assert ("org/ft", "Base/Model", "merge", "model card") in listed
    assert ("a/adapter-0", "q/ft-00-GGUF", "adapter", "hub tags") in listed
    assert len(listed) == len(view.edges) == 3 + svg.TREE_WIDTH + 3 + 1

    root = ET.fromstring(view.graph())
    drawn = root.findall(f"{NS}g[@class='tree-edge']")
    assert len(drawn) == len(view.edges)
    assert root.find(f"{NS}a[@class='tree-more']") is not None

    rest = [n.label for p in pages for n in p.repos]
    assert rest == [f"q/ft-{i:02d}-GGUF" for i in range(svg.TREE_WIDTH, 30)] + ["x/loop"]
