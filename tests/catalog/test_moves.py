"""Repo moves against a plain-Python model: random renames (onto free ids and onto ids the
catalog has in another row), the hub answering for an old id as a repo of its own again,
and children naming the moved repos by any of their ids, before and after each move.

After every sequence, on both databases: each child's edge is filed under the key its
declared parent resolves to through the moves in force (`repo_moves`), `moved_to` answers
for every id as the model says, and a `descendant_of` search by any id finds the children
the model files under it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from registry.api.present import search_hits
from registry.catalog import lineage
from registry.catalog.db import Database
from registry.catalog.models import Artifact, LineageEdge, Repo, repo_key
from registry.catalog.search import SearchQuery, search
from registry.catalog.services import repo_moved, upsert_repo_snapshot
from registry.catalog.snapshot import LineageRecord
from tests.catalog.conftest import empty_tables
from tests.catalog.factories import make_snapshot

EXAMPLES = int(os.environ.get("REGISTRY_SEARCH_EXAMPLES", "0"))
PROPERTY = settings(
    max_examples=EXAMPLES or 60,
    derandomize=not EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Parent ids, a few of them the same repo in another letter case.
IDS = ("p/a", "p/b", "p/c", "P/B")

# ("add", id): the hub answers for id as a repo of its own (indexed, a move from it ends);
# ("move", n, new): the hub answers for the id of the catalog's n-th hub row (by id, modulo
# their number; retired rows too) as new (a crawl asked for it by its old id);
# ("child", parent id, ...): a new child repo whose card names these parents (as one
# relation, so that ids of one repo make one edge).
Op = tuple[str, ...] | tuple[str, int, str]
ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.sampled_from(IDS)),
        st.tuples(st.just("move"), st.integers(0, 7), st.sampled_from(IDS)),
        st.lists(st.sampled_from(IDS), min_size=1, max_size=3).map(lambda parents: ("child", *parents)),
    ),
    min_size=1,
    max_size=16,
)


@dataclass
class Model:
    rows: dict[int, str] = field(default_factory=dict)  # hub row -> its id (never removed)
    moves: dict[str, int] = field(default_factory=dict)  # old key -> row
    children: dict[str, tuple[str, ...]] = field(default_factory=dict)  # child id -> the parents it names

    def row_of(self, repo_id: str) -> int | None:
        """The first row of this key, as the catalog looks a hub repo up."""
        return next((r for r, i in sorted(self.rows.items()) if repo_key(i) == repo_key(repo_id)), None)

    def resolve(self, key: str) -> str:
        row = self.moves.get(key)
        return key if row is None else repo_key(self.rows[row])

    def add(self, repo_id: str) -> None:
        """The hub answers for `repo_id` as itself: the row of that id, else the first of its
        key, which takes the hub's spelling, else a new row."""
        if repo_id not in self.rows.values():
            row = self.row_of(repo_id)
            self.rows[max(self.rows, default=0) + 1 if row is None else row] = repo_id
        self.moves.pop(repo_key(repo_id), None)

    def move(self, old: str, new: str) -> str | None:
        """What repo_moved does, when the catalog has a row spelled exactly `old`."""
        row = next((r for r, i in sorted(self.rows.items()) if i == old), None)
        if row is None:
            return None
        new_key, old_key = repo_key(new), repo_key(old)
        other = next((r for r, i in sorted(self.rows.items()) if repo_key(i) == new_key and r != row), None)
        if other is not None:
            if new_key != old_key:
                self.moves.pop(new_key, None)
                self.moves = {k: other if r == row else r for k, r in self.moves.items()}
                self.moves[old_key] = other
            return "retired"
        if new_key != old_key:
            self.moves.pop(new_key, None)
            self.moves[old_key] = row
        self.rows[row] = new
        return "renamed"


async def _apply(db: Database, model: Model, steps: list[Op]) -> None:
    for n, step in enumerate(steps):
        async with db.sessions() as session, session.begin():
            if step[0] == "add":
                model.add(str(step[1]))
                await upsert_repo_snapshot(session, make_snapshot(str(step[1])), hub_answered=True)
            elif step[0] == "move":
                if not model.rows:
                    continue
                rows = sorted(model.rows.items())
                old = rows[int(step[1]) % len(rows)][1]
                expected = model.move(old, str(step[2]))
                assert await repo_moved(session, old, str(step[2])) == expected, (old, step)
            else:
                child = f"child/{n}"
                model.children[child] = tuple(str(p) for p in step[1:])
                lineage_ = tuple(LineageRecord(str(p), "finetune", "card") for p in step[1:])
                await upsert_repo_snapshot(session, make_snapshot(child, lineage=lineage_))


@PROPERTY
@given(steps=ops)
# p/a moves to p/b, which then moves onto p/c, a row of its own: p/a's move follows it there
@example(steps=[("add", "p/a"), ("child", "p/a"), ("move", 0, "p/b"), ("add", "p/c"), ("move", 0, "p/c"),
                ("child", "p/a")])  # fmt: skip
# p/a moves to p/b and back: the edges naming either id are p/a's; then the hub has p/b again
@example(steps=[("add", "p/a"), ("child", "p/a"), ("child", "P/B"), ("move", 0, "p/b"), ("child", "p/a"),
                ("move", 0, "p/a"), ("add", "p/b"), ("child", "p/b")])  # fmt: skip
# children naming both ids, before the move and while it holds, then the hub has p/a again:
# each child is a child of both
@example(steps=[("add", "p/a"), ("child", "p/a", "p/b"), ("move", 0, "p/b"), ("child", "P/B", "p/a"),
                ("add", "p/a")])  # fmt: skip
# p/a retired onto p/b, which moves on to p/c; a child names p/a; then the hub answers for p/a
# as p/b (the retired row takes that id): the child's edge leaves p/c for p/b
@example(steps=[("add", "p/a"), ("add", "p/b"), ("move", 0, "p/b"), ("move", 1, "p/c"), ("child", "p/a"),
                ("move", 0, "p/b")])  # fmt: skip
# p/b retired onto p/a twice: the second time changes nothing, p/a's text keeps p/b
@example(steps=[("add", "p/a"), ("add", "p/b"), ("move", 1, "p/a"), ("move", 1, "p/a")])
async def test_edges_follow_the_moves_in_force(db: Database, steps: list[Op]) -> None:
    await empty_tables(db)
    model = Model()
    await _apply(db, model, steps)
    async with db.sessions() as session:
        rows = await session.execute(select(LineageEdge.child_repo_id, LineageEdge.parent_key))
        edges = {(child, key) for child, key in rows}
        assert edges == {(c, model.resolve(repo_key(p))) for c, ps in model.children.items() for p in ps}, steps
        for repo_id in IDS:
            row = model.moves.get(repo_key(repo_id))
            expected = None if row is None else model.rows[row]
            spelled = await lineage.moved_to(session, repo_id)
            assert spelled == expected, (repo_id, steps)
            found = await search(session, SearchQuery(descendant_of=repo_id, limit=100))
            here = model.resolve(repo_key(repo_id))
            below = {c for c, ps in model.children.items() if any(model.resolve(repo_key(p)) == here for p in ps)}
            assert {i.repo for i in search_hits(found)} == below, (repo_id, steps)
        ids = set((await session.scalars(select(Repo.repo_id).where(Repo.repo_id.not_like("child/%")))).all())
        assert ids == set(model.rows.values()), steps
        # Every row's artifacts are found by its id and the ids in force moved to it, at once,
        # and by no other: their search text begins with those, as a new write gives it.
        for repo in (await session.scalars(select(Repo).where(Repo.repo_id.not_like("child/%")))).all():
            head = " ".join([repo.repo_id, *await lineage.moved_from(session, repo.id)]).lower()
            texts = (await session.scalars(select(Artifact.search_text).where(Artifact.repo_pk == repo.id))).all()
            assert texts and all(t.startswith(f"{head} model-q4_k_m.gguf ") for t in texts), (head, texts, steps)


async def _searched(db: Database, text: str) -> set[str]:
    async with db.sessions() as session:
        return {i.repo for i in search_hits(await search(session, SearchQuery(text=text, limit=100)))}


async def _revision(db: Database, repo_id: str) -> str | None:
    async with db.sessions() as session:
        return await session.scalar(select(Repo.revision).where(Repo.repo_id == repo_id))


async def test_a_search_for_an_old_id_finds_the_repo_the_hub_moved_it_to(db: Database) -> None:
    """Each step as a crawl takes it: the move, then the repo indexed under the id the hub
    answered with. A renamed row matches a search for its new id and its old one as soon as
    the move is recorded, and so does a row that an old id was retired onto; once the hub
    answers for the old id as a repo of its own, the row it had moved to no longer matches it
    (and is read in full on its next crawl: its revision is forgotten)."""
    await empty_tables(db)
    a, b, c = "first-owner/model-GGUF", "second-owner/model-GGUF", "third-owner/model-GGUF"
    async with db.sessions() as session, session.begin():
        await upsert_repo_snapshot(session, make_snapshot(a), hub_answered=True)
        await upsert_repo_snapshot(session, make_snapshot(c), hub_answered=True)
    async with db.sessions() as session, session.begin():
        assert await repo_moved(session, a, b) == "renamed"
    assert await _searched(db, "first-owner") == {b} and await _searched(db, "second-owner") == {b}
    async with db.sessions() as session, session.begin():
        assert (await upsert_repo_snapshot(session, make_snapshot(b), hub_answered=True)).written == 1
    assert await _searched(db, "first-owner") == {b} and await _searched(db, "second-owner") == {b}
    async with db.sessions() as session, session.begin():
        assert await repo_moved(session, b, c) == "retired"
    assert await _searched(db, "first-owner") == {c} and await _searched(db, "second-owner") == {c}
    async with db.sessions() as session, session.begin():
        written = await upsert_repo_snapshot(session, make_snapshot(c), hub_answered=True)
    assert written.written == 1  # at the revision it had: written again all the same
    # both old ids now name c's artifacts; b's own are gone
    assert await _searched(db, "first-owner") == {c} and await _searched(db, "second-owner") == {c}
    assert await _searched(db, "third-owner") == {c}

    async with db.sessions() as session, session.begin():
        await upsert_repo_snapshot(session, make_snapshot(a, revision="rev9"), hub_answered=True)
    assert await _revision(db, c) is None
    assert await _searched(db, "first-owner") == {a} and await _searched(db, "second-owner") == {c}
    async with db.sessions() as session, session.begin():
        assert (await upsert_repo_snapshot(session, make_snapshot(c), hub_answered=True)).written == 1
    assert await _searched(db, "first-owner") == {a} and await _searched(db, "second-owner") == {c}
    async with db.sessions() as session:
        pk = await session.scalar(select(Repo.id).where(Repo.repo_id == c))
        assert pk is not None and await lineage.moved_from(session, pk) == [b]
