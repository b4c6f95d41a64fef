"""Architecture, license, file type and size label filters match in any ASCII case, on both
databases: stored folded, queried folded, facets counting case variants together."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import event, select

from registry.api.present import search_hits
from registry.catalog.db import Database
from registry.catalog.facets import facets
from registry.catalog.folding import FOLDS, ascii_lower, fold, fold_size_label, folded
from registry.catalog.models import Artifact, Facts
from registry.catalog.search import SearchPage, SearchQuery, search
from registry.catalog.services import upsert_repo_snapshot
from registry.catalog.snapshot import RepoSnapshot
from tests.catalog.conftest import empty_tables
from tests.catalog.factories import artifact, error_artifact, make_facts, make_snapshot


def variant_catalog() -> list[RepoSnapshot]:
    """One value written several ways, as real files do."""
    return [
        make_snapshot("a/llama-GGUF", downloads=30, card_license="MIT", artifacts=(
            artifact("one.gguf", make_facts(architecture="LLaMA", license=None, file_type="q4_k_m", size_label="7b")),
            artifact("two.gguf", make_facts(architecture="llama", license="mit", file_type="Q4_K_M", size_label="7B")),
            error_artifact("broken.gguf"),
        )),
        make_snapshot("b/mix-GGUF", downloads=20, card_license="apache-2.0", artifacts=(
            artifact("mix.gguf", make_facts(architecture="LLAMA", license="Apache-2.0", file_type="Q8_0",
                                            size_label="8X7b")),
            artifact("gemma.gguf", make_facts(architecture="gemma3", license="APACHE-2.0", file_type="q8_0",
                                              size_label="8x7B")),
        )),
        make_snapshot("c/uni-GGUF", downloads=10, card_license=None, artifacts=(
            artifact("uni.gguf", make_facts(architecture="qwen2", license="Ünï-License", file_type="F16",
                                            size_label="30b-a3b")),
        )),
    ]  # fmt: skip


async def _write(db: Database) -> Database:
    for snap in variant_catalog():
        async with db.sessions() as session, session.begin():
            await upsert_repo_snapshot(session, snap)
    return db


@pytest.fixture
async def catalog(db: Database) -> Database:
    return await _write(db)


@pytest.fixture
async def sqlite_catalog(sqlite_url: str) -> AsyncIterator[Database]:
    """The catalog in a SQLite file: probes, shared first pages and the facet memo are SQLite's."""
    db = Database.from_url(sqlite_url)
    try:
        yield await _write(db)
    finally:
        await empty_tables(db)
        await db.dispose()


async def run(db: Database, **kwargs: Any) -> SearchPage:
    async with db.sessions() as session:
        return await search(session, SearchQuery(**kwargs), with_total=True)


def paths(page: SearchPage) -> set[str]:
    return {i.path for i in search_hits(page)}


@pytest.mark.parametrize(
    ("name", "spellings", "expected"),
    [
        ("architecture", ("llama", "LLAMA", "LlAmA", "LLaMA"), {"one.gguf", "two.gguf", "mix.gguf"}),
        ("license", ("mit", "MIT", "Mit"), {"one.gguf", "two.gguf"}),  # one's is the card's
        ("license", ("apache-2.0", "APACHE-2.0", "Apache-2.0"), {"mix.gguf", "gemma.gguf"}),
        ("license", ("Ünï-License", "Ünï-LICENSE", "Ünï-license"), {"uni.gguf"}),
        ("file_type", ("Q4_K_M", "q4_k_m", "Q4_k_M"), {"one.gguf", "two.gguf"}),
        ("file_type", ("Q8_0", "q8_0"), {"mix.gguf", "gemma.gguf"}),
        ("size_label", ("7B", "7b"), {"one.gguf", "two.gguf"}),
        ("size_label", ("8x7B", "8X7B", "8x7b", "8X7b"), {"mix.gguf", "gemma.gguf"}),
        ("size_label", ("30B-A3B", "30b-a3b", "30B-a3B"), {"uni.gguf"}),
    ],
)
async def test_each_filter_matches_in_any_ascii_case(
    catalog: Database, name: str, spellings: tuple[str, ...], expected: set[str]
) -> None:
    for spelling in spellings:
        page = await run(catalog, **{name: spelling})
        assert paths(page) == expected, spelling
        assert page.total == len(expected)
        async with catalog.sessions() as session:
            counts = await facets(session, SearchQuery(**{name: spelling}))
        assert sum(counts["architecture"].values()) == len(expected)


@pytest.mark.parametrize(
    ("name", "value"),
    [("license", "ünï-license"), ("license", "ÜNÏ-LICENSE"), ("architecture", "llamа"), ("file_type", "Q4_K_M ")],
)
async def test_only_ascii_letters_fold(catalog: Database, name: str, value: str) -> None:
    """Other letters and characters are compared as they are, the same on both databases
    (PostgreSQL's lower() would fold Ü to ü; the `а` above is Cyrillic)."""
    assert paths(await run(catalog, **{name: value})) == set()


async def test_hits_and_facets_show_one_spelling_and_facts_keep_the_files(catalog: Database) -> None:
    page = await run(catalog, sort="name", status="all")
    shown = {i.path: (i.architecture, i.license, i.file_type, i.size_label) for i in search_hits(page)}
    assert shown == {
        "broken.gguf": (None, "mit", None, None),
        "one.gguf": ("llama", "mit", "Q4_K_M", "7B"),
        "two.gguf": ("llama", "mit", "Q4_K_M", "7B"),
        "mix.gguf": ("llama", "apache-2.0", "Q8_0", "8x7B"),
        "gemma.gguf": ("gemma3", "apache-2.0", "Q8_0", "8x7B"),
        "uni.gguf": ("qwen2", "Ünï-license", "F16", "30B-A3B"),
    }
    async with catalog.sessions() as session:
        counts = await facets(session, SearchQuery())
        own = (await session.execute(
            select(Artifact.path, Facts.architecture, Facts.license, Facts.file_type, Facts.size_label)
            .join(Facts, Facts.artifact_id == Artifact.id)
        )).all()  # fmt: skip
    assert counts["architecture"] == {"llama": 3, "gemma3": 1, "qwen2": 1}
    assert counts["license"] == {"apache-2.0": 2, "mit": 2, "Ünï-license": 1}
    assert counts["file_type"] == {"Q4_K_M": 2, "Q8_0": 2, "F16": 1}
    assert {p: tuple(rest) for p, *rest in own} == {
        "one.gguf": ("LLaMA", None, "q4_k_m", "7b"),
        "two.gguf": ("llama", "mit", "Q4_K_M", "7B"),
        "mix.gguf": ("LLAMA", "Apache-2.0", "Q8_0", "8X7b"),
        "gemma.gguf": ("gemma3", "APACHE-2.0", "q8_0", "8x7B"),
        "uni.gguf": ("qwen2", "Ünï-License", "F16", "30b-a3b"),
    }


async def test_facets_under_any_spelling_of_a_filter_are_the_same(catalog: Database) -> None:
    async with catalog.sessions() as session:
        for spellings in (
            [SearchQuery(license="mit"), SearchQuery(license="MIT")],
            [SearchQuery(architecture="llama", file_type="Q8_0"), SearchQuery(architecture="LLAMA", file_type="q8_0")],
            [SearchQuery(size_label="8x7B", text="mix"), SearchQuery(size_label="8X7B", text="mix")],
        ):
            first, *others = [await facets(session, q) for q in spellings]
            assert all(other == first for other in others), spellings
            assert sum(first["license"].values()) > 0


async def test_a_new_card_license_is_folded_where_the_file_names_none(catalog: Database) -> None:
    """Counters and card changes of the same revision rewrite the license copies in place."""
    async with catalog.sessions() as session, session.begin():
        await upsert_repo_snapshot(session, make_snapshot(
            "a/llama-GGUF", downloads=31, card_license="GPL-3.0", artifacts=variant_catalog()[0].artifacts,
        ))  # fmt: skip
    page = await run(catalog, license="gpl-3.0", status="all")
    assert paths(page) == {"one.gguf", "broken.gguf"}
    assert {i.license for i in search_hits(page)} == {"gpl-3.0"}
    assert paths(await run(catalog, license="MIT")) == {"two.gguf"}  # its file names one


async def test_a_value_longer_than_its_column_is_cut_then_folded(db: Database) -> None:
    label = "7b-" + "x" * 40
    async with db.sessions() as session, session.begin():
        await upsert_repo_snapshot(session, make_snapshot(artifacts=(artifact("long.gguf", make_facts(size_label=label)),)))
    [hit] = search_hits(await run(db, size_label=label[:32].upper()))
    assert hit.size_label == fold_size_label(label[:32]) == "7B-" + "X" * 29


async def test_spellings_of_a_filter_share_probes_first_pages_and_facets(sqlite_catalog: Database) -> None:
    """What is keyed by a query's values sees the folded value: another spelling runs no
    probe (its answer is known), reuses the first page's statement, and takes its facets
    from the memo."""
    catalog = sqlite_catalog
    executed: list[Any] = []

    def record(_conn: Any, clause: Any, *_args: Any) -> None:
        executed.append(clause)

    listen = (catalog.engine.sync_engine, "before_execute")
    event.listen(*listen, record)
    try:
        answers = []
        for spelling in ("LLAMA", "llama", "LlAmA"):
            executed.clear()
            q = SearchQuery(architecture=spelling, license="MIT")
            async with catalog.sessions() as session:
                answers.append(([i.path for i in search_hits(await search(session, q))], await facets(session, q)))
            if spelling == "LLAMA":
                first = list(executed)
                assert len(first) > 2  # the probes, the page and the facet counts
            else:
                # No probe and no facet count again: one statement, one the first spelling ran.
                assert len(executed) == 1 and any(executed[0] is e for e in first), executed
    finally:
        event.remove(*listen, record)
    assert answers[0] == answers[1] == answers[2]
    assert sorted(answers[0][0]) == ["one.gguf", "two.gguf"]


# -- folding itself ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("column", "value", "expected"),
    [
        ("architecture", "LLaMA", "llama"), ("architecture", "Qwen2MoE", "qwen2moe"),
        ("license", "Apache-2.0", "apache-2.0"), ("license", "CC-BY-NC-4.0", "cc-by-nc-4.0"),
        ("file_type", "q4_k_m", "Q4_K_M"), ("file_type", "iq2_xs", "IQ2_XS"), ("file_type", "bf16", "BF16"),
        ("size_label", "7b", "7B"), ("size_label", "135m", "135M"), ("size_label", "1.5b", "1.5B"),
        ("size_label", "8X7b", "8x7B"), ("size_label", "16x3.8b", "16x3.8B"), ("size_label", "30b-a3b", "30B-A3B"),
        ("size_label", "x7b", "X7B"), ("license", "Ünï-License", "Ünï-license"), ("file_type", "ß", "ß"),
        ("architecture", "\u212aELVIN", "\u212aelvin"), ("license", "İNFO", "İnfo"),
    ],
)  # fmt: skip
def test_fold_examples(column: str, value: str, expected: str) -> None:
    assert fold(column, value) == expected


_TEXT = st.text(alphabet=st.sampled_from("aAbBxX78.-_ßİ\u212a"), max_size=12)


@given(column=st.sampled_from(sorted(FOLDS)), a=_TEXT, b=_TEXT, flips=st.lists(st.booleans(), max_size=12))
def test_values_fold_alike_exactly_when_equal_ignoring_ascii_case(
    column: str, a: str, b: str, flips: list[bool]
) -> None:
    variant = "".join(c.swapcase() if c.isascii() and i < len(flips) and flips[i] else c for i, c in enumerate(a))
    assert fold(column, a) == fold(column, variant)
    assert (fold(column, a) == fold(column, b)) == (ascii_lower(a) == ascii_lower(b))


@given(column=st.sampled_from(sorted(FOLDS)), value=_TEXT)
def test_folding_keeps_everything_but_ascii_case(column: str, value: str) -> None:
    once = fold(column, value)
    assert once is not None and fold(column, once) == once
    assert len(once) == len(value) and ascii_lower(once) == ascii_lower(value)
    assert [c for c in once if not c.isascii()] == [c for c in value if not c.isascii()]


def test_folded_touches_the_folded_columns_only() -> None:
    values = {"architecture": "LLaMA", "license": None, "path": "A.gguf", "file_type": "q8_0", "parameter_count": 7}
    assert folded(values) == {"architecture": "llama", "license": None, "path": "A.gguf", "file_type": "Q8_0",
                              "parameter_count": 7}  # fmt: skip
