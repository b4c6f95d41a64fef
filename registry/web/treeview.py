"""What the tree page shows: the catalog's bounded layers around a repo (`catalog.layers`)
as the graph's nodes and edges (`svg.Tree`), the list of every drawn edge with its sources,
and the pages of a layer's rest."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, urlencode

from registry.catalog import layers
from registry.catalog.models import repo_key
from registry.catalog.readpath import CatalogSession
from registry.web import svg

SIDES = ("ancestors", "descendants")


def _path(repo_id: str) -> str:
    org, _, name = repo_id.partition("/")
    return f"{quote(org, safe='')}/{quote(name, safe='')}"


def repo_href(repo_id: str) -> str:
    return f"/repos/{_path(repo_id)}"


def tree_href(repo_id: str) -> str:
    return f"/tree/{_path(repo_id)}"


def more_href(repo_id: str, side: str, level: int, after: str) -> str:
    return f"{tree_href(repo_id)}/more?{urlencode({'side': side, 'level': level, 'after': after})}"


def node(repo: layers.TreeRepo) -> svg.Node:
    """A catalog repo links to its page; a parent outside the catalog to its own tree."""
    href = repo_href(repo.repo_id) if repo.in_catalog else tree_href(repo.repo_id)
    return svg.Node(key=repo.key, label=repo.repo_id, href=href, in_catalog=repo.in_catalog)


@dataclass(frozen=True)
class EdgeItem:
    """One line of the list under the graph: `child` is a `relation` of `parent`."""

    child: svg.Node
    parent: svg.Node
    relation: str
    sources: tuple[str, ...]  # gguf, card, tags

    @property
    def sources_text(self) -> str:
        return svg.sources_text(self.sources)


@dataclass(frozen=True)
class TreeView:
    tree: svg.Tree
    edges: list[EdgeItem]  # ancestors' first, each side nearest first

    def graph(self) -> str:
        return str(svg.lineage_graph(self.tree))


async def tree_view(session: CatalogSession, repo_id: str, in_catalog: bool) -> TreeView:
    """`repo_id` as the catalog (or, outside it, its children's edges) spells it."""
    focus = node(layers.TreeRepo(repo_key(repo_id), repo_id, in_catalog))
    nodes = {focus.key: focus}
    sides: dict[str, list[svg.Layer]] = {}
    items: list[EdgeItem] = []
    for side in SIDES:
        walked = await layers.walk(session, repo_id, side == "descendants", svg.TREE_DEPTH, svg.TREE_WIDTH)
        drawn: list[svg.Layer] = []
        for level, layer in enumerate(walked, 1):
            layer_nodes = [node(r) for r in layer.repos]
            nodes.update((n.key, n) for n in layer_nodes)
            more = more_href(repo_id, side, level, layer.repos[-1].key) if layer.more else None
            drawn.append(svg.Layer(layer_nodes, layer.more, more))
            grouped: dict[tuple[str, str, str], list[str]] = {}
            for e in layer.edges:
                grouped.setdefault((e.child, e.parent, e.relation), []).append(e.source)
            items += [EdgeItem(nodes[c], nodes[p], r, tuple(s)) for (c, p, r), s in grouped.items()
                      if c in nodes and p in nodes]  # fmt: skip
        sides[side] = drawn
    edges = [svg.Edge(i.child.key, i.parent.key, i.relation, i.sources) for i in items]
    return TreeView(svg.Tree(focus, sides["ancestors"], sides["descendants"], edges), items)


@dataclass(frozen=True)
class RestPage:
    side: str
    level: int
    repos: list[svg.Node]
    next_href: str | None


async def rest_page(session: CatalogSession, repo_id: str, side: str, level: int, after: str) -> RestPage:
    """The repos of a layer beyond those the graph draws, a page at a time by key."""
    repos, next_after = await layers.rest(session, repo_id, side == "descendants", level, svg.TREE_WIDTH, after)
    next_href = more_href(repo_id, side, level, next_after) if next_after is not None else None
    return RestPage(side, level, [node(r) for r in repos], next_href)


__all__ = ["SIDES", "EdgeItem", "RestPage", "TreeView", "more_href", "repo_href", "rest_page", "tree_href",
           "tree_view"]  # fmt: skip
