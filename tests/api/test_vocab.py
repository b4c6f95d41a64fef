"""The words the API and the command line speak (`registry.responses.vocab`) are the ones
the catalog stores and the format core and the template scanner derive."""

from __future__ import annotations

import subprocess
import sys

from registry.catalog import lineage, models, search
from registry.catalog.search import query
from registry.gguf import facts_model, vocab
from registry.gguf.compat import codes as compat_codes
from registry.responses import vocab as words
from registry.safety import capabilities, findings


def test_the_vocabulary_is_the_catalogs() -> None:
    assert words.REPO_SOURCES == models.REPO_SOURCES
    assert words.ARTIFACT_STATUSES == models.ARTIFACT_STATUSES
    assert words.STATUSES == search.STATUSES
    assert words.VERIFICATION_STATUSES == models.VERIFICATION_STATUSES
    assert words.LINEAGE_RELATIONS == models.LINEAGE_RELATIONS
    assert words.LINEAGE_SOURCES == models.LINEAGE_SOURCES
    assert words.CRAWL_KINDS == models.CRAWL_KINDS
    assert words.CRAWL_STATUSES == models.CRAWL_STATUSES
    assert words.JOB_KINDS == models.JOB_KINDS
    assert words.JOB_STATES == models.JOB_STATUSES
    assert words.REPO_PART == models.REPO_PART
    assert words.REPO_ID_LENGTH == models.REPO_ID_LENGTH
    assert words.FINDING_SEVERITIES == models.FINDING_SEVERITIES == compat_codes.SEVERITIES
    assert words.FINDING_CODES == query.FINDING_CODES == tuple(c.code for c in compat_codes.CODES)
    assert words.RUNTIMES == query.RUNTIMES


def test_the_search_words_are_the_searchs() -> None:
    assert tuple(search.SORTS) == words.SORT_KEYS
    assert words.SORT_ALIASES == search.SORT_ALIASES
    assert words.FACETS == search.FACETS
    assert set(words.FACET_NAMES) == set(search.FACET_NAMES)
    assert words.MAX_LIMIT == search.MAX_LIMIT
    assert words.MEMORY_CONTEXT == search.MEMORY_CONTEXT
    assert words.MAX_MEMORY_CONTEXT == search.MAX_MEMORY_CONTEXT
    assert (words.MAX_DEPTH, words.MAX_EDGES) == (lineage.MAX_DEPTH, lineage.MAX_EDGES)


def test_the_derived_words_are_the_format_cores_and_the_scanners() -> None:
    assert words.KINDS == facts_model.KINDS and words.MODALITIES == facts_model.MODALITIES
    assert words.SEVERITIES == findings.SEVERITIES
    assert words.CAPABILITIES == capabilities.CAPABILITIES
    assert words.MAX_SIZE_DIFFERENCE == vocab.MAX_SIZE_DIFFERENCE


def test_the_response_models_load_neither_the_database_nor_the_http_layer() -> None:
    # The command line builds its parser from them; `--help` must stay light.
    probe = (
        "import sys\n"
        "import registry.responses, registry.responses.params, registry.responses.schema\n"
        "import registry.responses.commands\n"
        "print(sorted(m for m in ('sqlalchemy', 'aiohttp') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"


def test_the_facts_model_holds_every_fact_the_format_core_derives() -> None:
    """A fact the format core adds must be added to the response model too (or shown apart)."""
    from dataclasses import fields

    from registry.responses import Facts

    shown_apart = {"quant_mix", "chat_template", "chat_templates", "metadata"}  # fields of the artifact itself
    # The memory profile is shown as what it gives: the line the search sizes by, and the
    # artifact's `memory_estimate` in parts.
    shown_as = {"memory_profile": "memory_line"}
    derived = {shown_as.get(f.name, f.name) for f in fields(facts_model.Facts)}
    assert derived - shown_apart == set(Facts.__struct_fields__)
