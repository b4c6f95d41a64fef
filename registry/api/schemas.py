"""JSON Schemas (2020-12, as OpenAPI 3.1 uses them) of every body the API reads or writes.

The OpenAPI document references these as `#/components/schemas/<name>`; the tests
validate every response the suite sees against them.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from registry.api.bodies import MAX_CRAWL_LIMIT, MAX_CRAWL_REPOS, MAX_SEARCH
from registry.api.launchers import JOB_STATES
from registry.api.params import BIGINT_MAX, NOT_BLANK
from registry.api.reads import MAX_FILE_MATCHES, MAX_PROJECTORS, MAX_REPO_ARTIFACTS
from registry.catalog.models import (
    ARTIFACT_STATUSES,
    CRAWL_KINDS,
    CRAWL_STATUSES,
    LINEAGE_RELATIONS,
    LINEAGE_SOURCES,
    REPO_PART,
    REPO_SOURCES,
    VERIFICATION_STATUSES,
)
from registry.gguf.facts_model import KINDS, MODALITIES
from registry.gguf.vocab import MAX_SIZE_DIFFERENCE
from registry.safety.capabilities import CAPABILITIES
from registry.safety.findings import SEVERITIES

Schema = dict[str, Any]


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


def obj(properties: dict[str, Schema], *, required: list[str] | None = None, closed: bool = True) -> Schema:
    """An object whose listed properties are all required unless `required` says otherwise."""
    out: Schema = {
        "type": "object",
        "properties": properties,
        "required": list(properties) if required is None else required,
    }
    if closed:
        out["additionalProperties"] = False
    return out


STR: Schema = {"type": "string"}
INT: Schema = {"type": "integer"}
NUM: Schema = {"type": "number"}
BOOL: Schema = {"type": "boolean"}
TIME: Schema = {"type": "string", "format": "date-time"}
OPT_STR = nullable(STR)
OPT_INT = nullable(INT)
OPT_TIME = nullable(TIME)
ANY_OBJECT: Schema = {"type": "object"}


def _page(item: str) -> Schema:
    return obj({
        "items": {"type": "array", "items": ref(item)},
        "next": {**OPT_STR, "description": "Cursor of the next page; null on the last page."},
        "limit": INT,
    })  # fmt: skip


ERROR = obj({
    "error": obj({
        "code": {**STR, "description": "Stable machine-readable code, e.g. invalid_parameter."},
        "message": {**STR, "description": "Human-readable explanation."},
        "details": {**ANY_OBJECT, "description": "Structured context: `parameter`, `field`, `allowed`..."},
    }),
})  # fmt: skip

# The search copies of these values are stored in one spelling each, whatever the case.
_FOLDED = "In the spelling search matches and facets count; the artifact's `facts` keep the file's own."
_SUMMARY_PROPS: dict[str, Schema] = {
    "id": INT,
    "repo": STR,
    "path": STR,
    "revision": OPT_STR,
    "status": {"enum": list(ARTIFACT_STATUSES)},
    "error": nullable(obj({"code": OPT_STR, "message": OPT_STR})),
    "architecture": {**OPT_STR, "description": f"Lower case, e.g. llama. {_FOLDED}"},
    "parameter_count": INT,
    "file_type": {**OPT_STR, "description": f"Upper case, e.g. Q4_K_M. {_FOLDED}"},
    "size_label": {**OPT_STR, "description": f"Upper case but for an expert count's x, e.g. 7B, 8x7B. {_FOLDED}"},
    "license": {
        **OPT_STR,
        "description": f"The file's license, else the repo card's; lower case, e.g. apache-2.0. {_FOLDED}",
    },
    "context_length": OPT_INT,
    "expert_count": OPT_INT,
    "shard_count": INT,
    "file_size": INT,
    "downloads": INT,
    "likes": INT,
    "last_modified": OPT_TIME,
    "verification_status": nullable({"enum": list(VERIFICATION_STATUSES)}),
    "chat_template_severity": {
        **nullable({"enum": list(SEVERITIES)}),
        "description": "Worst chat template safety finding; null when clean or not scanned.",
    },
    "chat_template_capabilities": {
        **nullable({"type": "array", "items": {"enum": list(CAPABILITIES)}}),
        "description": "What the chat templates can do, each seen in a probe render in the sandbox: `system` (a "
        "system message reaches the prompt), `tools` (a tool definition does), `tool_calls` (an assistant's tool "
        "call does), `thinking` (reasoning is carried, opened or switched), `parallel_tool_calls` (two tool calls "
        "of one turn both do). [] for none or no template; null when "
        "not probed (rows an older release wrote, until the next crawl or index reads them again).",
    },
    "kind": {
        **nullable({"enum": list(KINDS)}),
        "description": "What the file is: a model, a multimodal projector (`mmproj`, llama.cpp's --mmproj), a LoRA "
        "adapter, an importance matrix or a vocabulary alone. Null for error rows.",
    },
    "modalities": {
        **nullable({"type": "array", "items": {"enum": list(MODALITIES)}}),
        "description": "What a projector (`kind` mmproj) takes in besides text, from its `clip.has_vision_encoder` "
        "and `clip.has_audio_encoder` flags; [] when it declares neither. Null on every other kind.",
    },
    "memory": {
        **nullable(obj({"tokens": INT, "bytes": INT})),
        "description": "What it needs to run: the file (all shards) plus its f16 KV cache (`facts.kv_cache`) at "
        "`tokens` tokens: a search's `memory_context` (default 4096), or the model's own context_length when "
        "that is shorter. Compute buffers are not counted. Null without a KV cache estimate.",
    },
    "url": STR,
}
ARTIFACT_SUMMARY = obj(_SUMMARY_PROPS)

KV_CACHE: Schema = {
    **nullable(obj(
        {"layers": INT, "bytes_per_token": INT, "swa_layers": INT, "swa_bytes_per_token": INT,
         "sliding_window": OPT_INT, "at_context_length": OPT_INT, "recurrent_layers": INT,
         "at_context": nullable(obj({"tokens": INT, "bytes": INT}))},
        required=["layers", "bytes_per_token"], closed=False,
    )),
    "description": "The f16 KV cache per token of context (registry/gguf/kvcache.py): `layers` full-attention "
    "layers of `bytes_per_token` together, and `swa_layers` that keep only the last `sliding_window` tokens: at "
    "N tokens it takes N * bytes_per_token + min(N, sliding_window) * swa_bytes_per_token bytes; "
    "`at_context_length` is that at the model's context_length. A hybrid model's `recurrent_layers` keep a "
    "fixed-size state instead, not counted. `at_context`: at the request's `context` tokens. Null: not estimated (encoders, purely recurrent models, adapters), "
    "or indexed before the estimate existed (`--full` writes it).",
}  # fmt: skip

# Facts evolve with the format core; the typed ones are pinned, others may appear.
FACTS = obj(
    {
        "architecture": OPT_STR, "name": OPT_STR, "basename": OPT_STR, "finetune": OPT_STR, "version": OPT_STR,
        "size_label": OPT_STR, "size_label_source": OPT_STR, "parameter_count": INT, "license": OPT_STR,
        "file_type": OPT_STR, "file_type_source": OPT_STR, "bits_per_weight": nullable(NUM),
        "context_length": OPT_INT, "embedding_length": OPT_INT, "block_count": OPT_INT,
        "feed_forward_length": OPT_INT, "head_count": OPT_INT, "head_count_kv": OPT_INT, "expert_count": OPT_INT,
        "expert_used_count": OPT_INT, "tokenizer_model": OPT_STR, "tokenizer_pre": OPT_STR, "vocab_size": OPT_INT,
        "vocab_sha256": {**OPT_STR, "description": "The vocabulary key (registry/gguf/vocab.py): artifacts with the same "
                         f"key and at most {MAX_SIZE_DIFFERENCE} tokens more or fewer can draft for one another in speculative decoding "
                         "(`draft_for`). Null: no token list, or an older release wrote it (until the next crawl or index)."},
        "chat_template_sha256": OPT_STR, "kind": STR,
        "modalities": {"type": "object", "additionalProperties": OPT_STR,
                       "description": "A projector's inputs (vision, audio), each with the projector type "
                       "its file names (clip.{vision,audio}.projector_type, else clip.projector_type). "
                       "Empty on every other kind."},
        "gguf_version": INT, "endianness": STR, "alignment": INT,
        "tensor_count": INT, "kv_count": INT, "header_bytes": INT, "file_size": OPT_INT, "shard_count": INT,
        "kv_cache": KV_CACHE,
    },
    required=["architecture", "parameter_count", "file_type", "kind", "gguf_version", "tensor_count"],
    closed=False,
)  # fmt: skip

# Open: rows written by a newer scanner may carry more keys.
TEMPLATE_FINDING = obj(
    {
        "code": {**STR, "description": "Stable kind of problem, e.g. dunder-attribute."},
        "severity": {"enum": list(SEVERITIES)},
        "message": STR,
        "excerpt": {**STR, "description": "The offending part of the template or its output (bounded)."},
        "template": {**STR, "description": "`default` or the name of a named template variant."},
    },
    closed=False,
)

QUANT_MIX_ENTRY = obj({"tensor_type": STR, "tensors": INT, "elements": INT, "bytes": INT})
SHARD = obj({
    "path": STR, "split_no": INT, "size": OPT_INT, "sha256": OPT_STR, "header_bytes": OPT_INT,
    "url": {**OPT_STR, "description": "Where to download the file: the hub's /resolve/ URL at the commit the catalog "
            "read (`hub.endpoint`); null for a local folder's files."},
})  # fmt: skip

FILE_MATCHES = obj({
    "sha256": STR,
    "count": {**INT, "description": f"How many files of the catalog hold these bytes; `files` lists the first "
              f"{MAX_FILE_MATCHES}."},
    "files": {"type": "array", "items": obj({
        "repo": STR, "path": STR, "split_no": INT, "size": OPT_INT, "revision": STR,
        "artifact": obj({"id": INT, "path": STR, "status": {"enum": list(ARTIFACT_STATUSES)}}),
        "url": {**OPT_STR, "description": "Where to download the file: the hub's /resolve/ URL at the commit the "
                "catalog read."},
    })},
})  # fmt: skip

VERIFICATION = obj({
    "id": INT, "artifact_id": INT, "status": {"enum": list(VERIFICATION_STATUSES)}, "reason": OPT_STR,
    "sha256": OPT_STR, "tensors_checked": OPT_INT, "nonfinite_values": OPT_INT, "perplexity": nullable(NUM),
    "generated": OPT_STR, "details": ANY_OBJECT, "timings": ANY_OBJECT, "queued_at": TIME,
    "started_at": OPT_TIME, "finished_at": OPT_TIME, "url": STR,
})  # fmt: skip

_ARTIFACT_PARTS: dict[str, Schema] = {
    "facts": nullable(ref("Facts")),
    "quant_mix": {"type": "array", "items": ref("QuantMixEntry")},
    "shards": {"type": "array", "items": ref("Shard")},
    "latest_verification": nullable(ref("Verification")),
    "chat_template_findings": {
        **nullable({"type": "array", "items": ref("TemplateFinding")}),
        "description": "Safety findings for the chat templates, worst first; [] when clean (or no template), "
        "null when not scanned (error rows, scanner unavailable, indexed before scanning existed).",
    },
}
# Flat, closed objects rather than allOf: `additionalProperties: false` inside an allOf
# branch would reject the very fields the other branch adds.
ARTIFACT_IN_REPO = obj({**_SUMMARY_PROPS, **_ARTIFACT_PARTS})
ARTIFACT = obj({
    **_SUMMARY_PROPS,
    **_ARTIFACT_PARTS,
    "chat_template": {**OPT_STR, "description": "The default chat template, as text."},
    "chat_templates": {"type": "object", "additionalProperties": STR},
    "metadata": {
        **ANY_OBJECT,
        "description": "Scalar metadata of the first shard; long arrays and strings are summarised "
        "as {summary, length, head}.",
    },
    "projectors": {
        "type": "array", "maxItems": MAX_PROJECTORS,
        "items": obj({"id": INT, "path": STR, "file_size": INT,
                      "modalities": nullable({"type": "array", "items": {"enum": list(MODALITIES)}}), "url": STR}),
        "description": "The indexed multimodal projectors in the artifact's repo (itself left out), by path, at "
        f"most {MAX_PROJECTORS}: the files to give llama.cpp's --mmproj with a model, and what each takes in.",
    },
})  # fmt: skip

REPO = obj({
    "repo_id": STR, "source": {"enum": list(REPO_SOURCES)}, "revision": OPT_STR, "last_modified": OPT_TIME,
    "downloads": INT, "likes": INT, "tags": {"type": "array", "items": STR}, "gated": BOOL,
    "card_license": OPT_STR, "card_base_model": {"type": "array", "items": STR},
    "card_base_model_relation": OPT_STR, "description": OPT_STR, "indexed_at": OPT_TIME, "url": STR,
})  # fmt: skip

LINEAGE_EDGE = obj({
    "child": STR,
    "parent": {**STR, "description": "As the catalog spells the repo; a parent outside the catalog as the "
               "edge's source wrote it. Repo ids match in any case of A-Z, as on the hub."}, "relation": {"enum": list(LINEAGE_RELATIONS)},
    "source": {"enum": list(LINEAGE_SOURCES)}, "depth": {"type": "integer", "minimum": 1},
    "child_in_catalog": BOOL, "parent_in_catalog": BOOL,
})  # fmt: skip

EDGES: Schema = {"type": "array", "items": ref("LineageEdge")}

REPO_DETAIL = obj({
    "repo": ref("Repo"),
    "artifacts": {"type": "array", "items": ref("ArtifactInRepo"),
                  "description": f"Its files, by path, at most {MAX_REPO_ARTIFACTS} (`artifact_count` says how many "
                  "there are; `artifacts_url` pages through them all); error rows too, gone files not."},
    "artifact_count": {**INT, "description": "How many artifacts the repo has, gone files not counted."},
    "artifacts_url": {**STR, "description": "The search for the repo's indexed artifacts, by name "
                      "(`/v1/artifacts?repo=...`): add `status=error` for its error rows, or any other filter."},
    "lineage": obj({"parents": EDGES, "children": EDGES}),
    "moved_from": {"type": "array", "items": STR,
                   "description": "Ids the hub has answered for as this repo (renamed, transferred), as the "
                   "catalog spelled them, oldest move first; their routes redirect here."},
})  # fmt: skip

LINEAGE = obj(
    {
        "repo": STR,
        "direction": {"enum": ["ancestors", "descendants", "both"]},
        "depth": INT,
        "in_catalog": BOOL,
        "ancestors": EDGES,
        "descendants": EDGES,
        "truncated": {
            **BOOL,
            "description": "True when a side of the tree had more than `max_edges` edges within `depth`: "
            "that side lists its first `max_edges`, shallowest first. Ask again from a deeper repo "
            "or with a smaller depth to see the rest; `/v1/artifacts?descendant_of=` pages through "
            "every descendant's files.",
        },
        "max_edges": {**INT, "description": "Most edges listed on each side."},
    },
    required=["repo", "direction", "depth", "in_catalog", "truncated", "max_edges"],
)

COUNTS: Schema = {"type": "object", "additionalProperties": INT}
# Architecture, license and file type values come in the spelling of search hits, so case
# variants of one value (MIT, mit) count together.
FACET_COUNTS: Schema = {**COUNTS, "description": "Artifacts per value, in the spelling search hits show; "
                        "`unknown`: no value."}
FACETS = obj({
    "facets": obj({"architecture": FACET_COUNTS, "license": FACET_COUNTS, "file_type": FACET_COUNTS,
                   "size_bucket": COUNTS, "kind": COUNTS,
                   "capability": {**COUNTS, "description": "Artifacts per capability of their chat templates; "
                                  "one counts under each it has."},
                   "verification": {**COUNTS, "description": "Artifacts per status of their latest verification; "
                                    "`unknown`: never verified."}},
                  required=[]) | {"description": "The facets asked for (`facets`), in that order; by default "
                                                 "architecture, license, file_type and size_bucket."},
    "filters": {**ANY_OBJECT, "description": "The filters the counts were taken under, as applied: architecture, license, file type and size label in the spelling the facets show."},
})  # fmt: skip

CRAWL = obj({
    "id": INT, "kind": {"enum": list(CRAWL_KINDS)}, "status": {"enum": list(CRAWL_STATUSES)},
    "parameters": ANY_OBJECT, "counters": ANY_OBJECT, "errors": {"type": "array"}, "started_at": TIME,
    "heartbeat_at": OPT_TIME, "finished_at": OPT_TIME, "url": STR,
})  # fmt: skip

JOB = obj({
    "id": INT,
    "kind": {**STR, "description": "crawl, index_repo or verify."},
    "queue": STR, "status": {"enum": list(JOB_STATES)},
    "args": {**ANY_OBJECT, "description": "The job function's arguments (crawl_id, repo_id, verification_id)."},
    "attempts": INT, "error": OPT_STR, "created_at": OPT_TIME, "started_at": OPT_TIME,
    "finished_at": OPT_TIME, "url": STR,
})  # fmt: skip


# Not blank, with no NUL anywhere: the server refuses NUL, which the catalog cannot store.
SEARCH_TEXT = rf"^[^\x00]*{NOT_BLANK}[^\x00]*$"


def crawl_request(sources: Collection[str]) -> Schema:
    """The crawl body; `source` is an enum of the sources this server's launcher has. The
    `local` source (the server's folders) takes no repos or filters, only `full`."""
    source: Schema = {**STR, "description": "Name of a configured source (e.g. `hub`); never a URL."}
    listed = sorted(set(sources) - {"local"})
    if listed:
        source["enum"] = listed
    hub = _hub_crawl_request(source)
    if "local" not in sources:
        return hub
    local = obj(
        {
            "source": {"const": "local", "description": "The server's local folders (local.folders), each whole."},
            "repos": {"type": "array", "maxItems": 0},
            "author": {"type": "null"},
            "search": {"type": "null"},
            "limit": {"type": "null"},
            "full": {**BOOL, "description": "Write unchanged folders again (after an upgrade)."},
        },
        required=["source"],
    )
    return {"oneOf": [hub, local]} if listed else local


def _hub_crawl_request(source: Schema) -> Schema:
    return obj(
        {
            "source": source,
            "repos": {
                "type": "array", "maxItems": MAX_CRAWL_REPOS,
                "items": {"type": "string", "pattern": f"^{REPO_PART}/{REPO_PART}$"},
            },
            # null means the same as leaving the field out
            "author": nullable({"type": "string", "pattern": f"^{REPO_PART}$"}),
            "search": nullable({"type": "string", "minLength": 1, "maxLength": MAX_SEARCH, "pattern": SEARCH_TEXT}),
            "limit": nullable({"type": "integer", "minimum": 1, "maximum": MAX_CRAWL_LIMIT}),
            "full": {**BOOL, "description": "Read and write repos whose revision did not change (after an "
                     "upgrade)."},
        },
        required=["source"],
    )  # fmt: skip


_EVENT_WORD = {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$"}
_REPO_NAME = {"type": "string", "pattern": f"^{REPO_PART}/{REPO_PART}$"}
# Open objects: the hub sends more than these fields (ids, urls, owner, headSha, ...).
HUB_WEBHOOK = obj(
    {
        "event": obj({"action": {**_EVENT_WORD, "description": "create, delete, move or update."},
                      "scope": {**_EVENT_WORD, "description": "repo, repo.content, repo.config, discussion, ..."}},
                     closed=False),
        "repo": obj({"type": {**STR, "description": "model, dataset or space: only model repos are crawled."},
                     "name": _REPO_NAME}, closed=False),
        "movedTo": obj({"name": _REPO_NAME}, closed=False),
        "updatedRefs": {"type": "array", "items": obj({"ref": STR}, required=[], closed=False),
                        "description": "With new commits: a crawl only when `refs/heads/main` is among them."},
    },
    required=["event", "repo"],
    closed=False,
)  # fmt: skip
WEBHOOK_IGNORED = obj({
    "ignored": {**STR, "description": "Why the delivery asks for no crawl."},
    "event": obj({"action": STR, "scope": STR}),
})  # fmt: skip

VERIFICATION_REQUEST = obj({"artifact_id": {"type": "integer", "minimum": 1, "maximum": BIGINT_MAX}})

HEALTH = obj({"status": {"const": "ok"}})
READY = obj({"status": {"const": "ready"}, "checks": obj({"database": {"const": "ok"}})})

COMPONENT_SCHEMAS: dict[str, Schema] = {
    "Error": ERROR,
    "ArtifactSummary": ARTIFACT_SUMMARY,
    "ArtifactPage": _page("ArtifactSummary"),
    "Facts": FACTS,
    "QuantMixEntry": QUANT_MIX_ENTRY,
    "TemplateFinding": TEMPLATE_FINDING,
    "Shard": SHARD,
    "FileMatches": FILE_MATCHES,
    "Verification": VERIFICATION,
    "ArtifactInRepo": ARTIFACT_IN_REPO,
    "Artifact": ARTIFACT,
    "Repo": REPO,
    "LineageEdge": LINEAGE_EDGE,
    "RepoDetail": REPO_DETAIL,
    "Lineage": LINEAGE,
    "Facets": FACETS,
    "Crawl": CRAWL,
    "CrawlPage": _page("Crawl"),
    "Job": JOB,
    "JobPage": _page("Job"),
    "CrawlRequest": crawl_request(()),
    "VerificationRequest": VERIFICATION_REQUEST,
    "HubWebhook": HUB_WEBHOOK,
    "WebhookIgnored": WEBHOOK_IGNORED,
    "Health": HEALTH,
    "Ready": READY,
}
