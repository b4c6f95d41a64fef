"""JSON Schemas (2020-12, as OpenAPI 3.1 uses them) of every body the API reads or writes,
generated from the models: `components()` is the `components.schemas` of /openapi.json.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from registry.responses import artifacts, operations, repos, requests
from registry.responses.base import ENUM_NAME

Schema = dict[str, Any]
REF_TEMPLATE = "#/components/schemas/{name}"

# Every model a route answers with or reads, by the name the document gives it.
MODELS: tuple[type[msgspec.Struct], ...] = (
    operations.Error, artifacts.ArtifactSummary, artifacts.ArtifactPage, artifacts.Artifact,
    artifacts.ArtifactInRepo, artifacts.TensorPage, artifacts.Facets, artifacts.FileMatches, repos.RepoDetail, repos.Lineage,
    operations.Verification, operations.VerificationPage, operations.Crawl, operations.CrawlPage, operations.Job, operations.JobPage,
    operations.Health, operations.Ready, operations.WebhookIgnored, requests.CrawlRequest,
    requests.LocalCrawlRequest, requests.VerificationRequest, requests.HubWebhook,
)  # fmt: skip


def ref(name: str) -> Schema:
    return {"$ref": REF_TEMPLATE.format(name=name)}


def components(limits: Mapping[tuple[str, str], Schema] | None = None) -> dict[str, Schema]:
    """The schema of each model and of the models they hold, by name. `limits` adds keywords
    to a property, `(model, property) -> {...}`: bounds that live in the server's settings
    or queries (the most items a page lists, the crawl sources it has)."""
    _, found = msgspec.json.schema_components(MODELS, ref_template=REF_TEMPLATE)
    enums: dict[str, Schema] = {}
    for schema in found.values():
        _clean(schema, enums)
    found.update(sorted(enums.items()))
    for (model, prop), extra in (limits or {}).items():
        found[model]["properties"][prop].update(extra)
    return dict(found)


def _clean(schema: Any, enums: dict[str, Schema]) -> Any:
    """Descriptions on one line (a class docstring keeps its source's line breaks and indents);
    every array says what its items are, if anything (`{}`): client generators refuse an
    array schema without `items`; a named enum (`base.one_of`) becomes a reference to the
    component `enums` gets for it. Returns what replaces `schema`."""
    if isinstance(schema, list):
        schema[:] = [_clean(value, enums) for value in schema]
    if not isinstance(schema, dict):
        return schema
    if (name := schema.pop(ENUM_NAME, None)) is not None:
        enums[name] = {"type": "string", "enum": schema.pop("enum")}
        schema.pop("type", None)
        return {**ref(name), **schema} if schema else ref(name)
    if isinstance(text := schema.get("description"), str):
        schema["description"] = " ".join(text.split())
    if schema.get("type") == "array" and "items" not in schema and "prefixItems" not in schema:
        schema["items"] = {}
    for key, value in schema.items():
        schema[key] = _clean(value, enums)
    return schema


__all__ = ["MODELS", "REF_TEMPLATE", "components", "ref"]
