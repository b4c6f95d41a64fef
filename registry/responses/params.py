"""Every query parameter, declared once: its name, its parser, its JSON Schema, its description
and its default. The API checks requests against these (`registry.api.params.parse_query`),
its OpenAPI document lists them, and the command line's options are built from the same
declarations (`registry.cli.common.add_param`), so `memory_context=32K` and `--memory-context
32K` read the same, and refuse the same with the same message.

A parser takes the parameter's name and its raw text and returns the value, or raises
`BadValue` naming the parameter (the API answers 400 `invalid_parameter`, the command line
exits 2). Descriptions name other parameters in backticks (`memory_context`); the command
line shows them as its options (--memory-context).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from registry.catalog import amounts
from registry.gguf.memory import CACHE_TYPES
from registry.responses.vocab import (
    BIGINT_MAX,
    CAPABILITIES,
    CRAWL_STATUSES,
    DEFAULT_DEPTH,
    DEFAULT_SORT,
    DIRECTIONS,
    FACET_NAMES,
    FACETS,
    FINDING_CODES,
    INT_MAX,
    JOB_STATES,
    KINDS,
    MAX_DEPTH,
    MAX_LIMIT,
    MAX_MEMORY_CONTEXT,
    MAX_SIZE_DIFFERENCE,
    MEMORY_CONTEXT,
    MODALITIES,
    REPO_ID_LENGTH,
    REPO_PART,
    RUNTIMES,
    SEVERITIES,
    SORT_ALIASES,
    SORT_CHOICES,
    SORT_KEYS,
    STATUSES,
    VERIFICATION_STATUSES,
)


class BadValue(ValueError):
    """A parameter's value that its parser refuses; `details` say what it allows."""

    def __init__(self, name: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.name, self.message, self.details = name, message, details


Parser = Callable[[str, str], Any]  # (name, raw) -> value, raising BadValue

MAX_TEXT = 200  # longest free-text or name value; longer ones are mistakes or abuse
# JSON Schema pattern: at least one character that is not a space or NUL. Python's
# str.strip(), which the server checks with, also strips \x1c-\x1f and \x85, which the
# schema's (ECMA) `\s` does not cover: without them a client could send a "valid" value the
# server refuses. NUL counts as blank since the catalog drops it from what it compares.
NOT_BLANK = r"[^\s\x00\x1c-\x1f\x85]"


@dataclass(frozen=True)
class Param:
    name: str
    parse: Parser
    schema: Mapping[str, Any]
    description: str
    default: Any = None  # the parsed value when the parameter is absent
    default_doc: Any = None  # how the default reads in the docs, when it differs from `default`
    metavar: str | None = None  # the command line's name for its value

    def openapi(self) -> dict[str, Any]:
        schema: dict[str, Any] = dict(self.schema)
        shown = self.default if self.default_doc is None else self.default_doc
        if shown is not None:
            schema["default"] = shown
        return {"name": self.name, "in": "query", "required": False, "description": self.description,
                "schema": schema}  # fmt: skip

    def read(self, raw: str) -> Any:
        return self.parse(self.name, raw)


def text(max_length: int = MAX_TEXT) -> Parser:
    def parse(name: str, raw: str) -> str:
        if len(raw) > max_length:
            raise BadValue(name, f"{name} is longer than {max_length} characters")
        value = raw.strip()
        if not value.replace("\x00", "").strip():  # the catalog drops NUL: "\x00" would filter nothing
            raise BadValue(name, f"{name} must not be empty")
        return value

    return parse


def integer(minimum: int | None = None, maximum: int | None = None) -> Parser:
    def parse(name: str, raw: str) -> int:
        # int() alone would accept "1_000", " 12 " and other scripts' digits ("\uff11"); the
        # parameters take plain ASCII digits.
        if not raw.isascii() or not raw.removeprefix("-").isdigit() or len(raw) > 20:
            raise BadValue(name, f"{name} must be an integer, got {raw!r}")
        value = int(raw)
        if minimum is not None and value < minimum:
            raise BadValue(name, f"{name} must be at least {minimum}", minimum=minimum)
        if maximum is not None and value > maximum:
            raise BadValue(name, f"{name} must be at most {maximum}", maximum=maximum)
        return value

    return parse


def amount(read: Callable[[str], int]) -> Parser:
    """A parameter count or byte size (`catalog.amounts`): digits, `7e9`, `7B`, `6GiB`."""

    def parse(name: str, raw: str) -> int:
        try:
            return read(raw)
        except amounts.BadAmount as exc:
            raise BadValue(name, f"{name}: {exc}") from None

    return parse


TOKENS_PATTERN = r"^[1-9][0-9]{0,12}[kKmM]?$"
_TOKEN_SCALE = {"": 1, "k": 1 << 10, "m": 1 << 20}


def tokens(name: str, raw: str) -> int:
    """A number of tokens of context: `8192`, `8K` (times 1,024, as contexts are counted), `1M`.
    More than MAX_MEMORY_CONTEXT counts as that: every text the pattern allows is a context."""
    if re.fullmatch(TOKENS_PATTERN, raw) is None:
        raise BadValue(name, f"{name}: not a token count: {raw!r} (e.g. 8192, 8K, 1M)", pattern=TOKENS_PATTERN)
    unit = raw[-1].lower() if raw[-1].isalpha() else ""
    return min(int(raw.removesuffix(raw[-1]) if unit else raw) * _TOKEN_SCALE[unit], MAX_MEMORY_CONTEXT)


def choice(values: Sequence[str], shown: str | None = None) -> Parser:
    """One of `values`; the message lists them (or says `shown` instead, for a long list)."""
    allowed = tuple(values)

    def parse(name: str, raw: str) -> str:
        if raw not in allowed:
            raise BadValue(name, f"{name} must be one of {shown or ', '.join(allowed)}", allowed=list(allowed))
        return raw

    return parse


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
BOOLEAN_WORDS = sorted(_TRUE | _FALSE)  # what `boolean` reads (in any case)


def boolean(name: str, raw: str) -> bool:
    lowered = raw.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise BadValue(name, f"{name} must be a boolean (1/0, true/false)")


def names(values: Sequence[str], max_length: int, noun: str) -> Parser:
    """Comma-separated names from `values` (each a `noun`), each once, in the order given: a tuple."""

    def parse(name: str, raw: str) -> tuple[str, ...]:
        wanted = tuple(dict.fromkeys(n.strip() for n in text(max_length)(name, raw).split(",")))
        unknown = [n for n in wanted if n not in values]
        if unknown:
            raise BadValue(name, f"unknown {noun} {unknown[0]!r}: {name} takes {', '.join(values)}",
                           allowed=list(values))  # fmt: skip
        return wanted

    return parse


def pattern(regex: str, message: str, max_length: int) -> Parser:
    """Text that the (anchored) `regex` matches whole."""
    compiled = re.compile(regex)

    def parse(name: str, raw: str) -> str:
        if len(raw) > max_length or compiled.fullmatch(raw) is None:
            raise BadValue(name, f"{name} must be {message}", pattern=regex)
        return raw

    return parse


def text_param(name: str, description: str, *, max_length: int = MAX_TEXT, metavar: str | None = None) -> Param:
    schema = {"type": "string", "minLength": 1, "maxLength": max_length, "pattern": NOT_BLANK}
    return Param(name, text(max_length), schema, description, metavar=metavar)


def int_param(
    name: str, description: str, *, minimum: int = 0, maximum: int = BIGINT_MAX, default: int | None = None,
    metavar: str = "N",
) -> Param:  # fmt: skip
    schema = {"type": "integer", "minimum": minimum, "maximum": maximum}
    return Param(name, integer(minimum, maximum), schema, description, default=default, metavar=metavar)


_AMOUNT_NOTE = (
    " An integer, or a decimal number with an optional exponent, optionally followed by a unit"
    " (any case); amounts above 2**63 - 1 count as that."
)


def count_param(name: str, description: str) -> Param:
    """A parameter-count filter: `7000000000`, `7e9`, `7B`, `1.5B`, `500M`."""
    schema = {"type": "string", "pattern": amounts.PARAMS_PATTERN, "maxLength": amounts.MAX_LENGTH,
              "examples": ["7000000000", "7B", "1.5B", "500M", "7e9"]}  # fmt: skip
    return Param(name, amount(amounts.parameter_count), schema, description + _AMOUNT_NOTE, metavar="N")


def size_param(name: str, description: str) -> Param:
    """A byte-size filter: `8000000000`, `8GB`, `8G`, `6GiB`, `500MB`, `7.5e9`."""
    schema = {"type": "string", "pattern": amounts.SIZE_PATTERN, "maxLength": amounts.MAX_LENGTH,
              "examples": ["8000000000", "8GB", "6GiB", "500MB", "7.5e9"]}  # fmt: skip
    return Param(name, amount(amounts.byte_size), schema, description + _AMOUNT_NOTE, metavar="S")


def tokens_param(name: str, description: str) -> Param:
    """A context in tokens: `8192`, `8K`, `1M`."""
    schema = {"type": "string", "pattern": TOKENS_PATTERN, "examples": ["4096", "8K", "32k", "1M"]}
    note = (" A whole number of tokens, or of K (times 1,024) or M (times 1,048,576), in any case: 8192, 8K, 1M; "
            f"more than {MAX_MEMORY_CONTEXT} counts as that.")  # fmt: skip
    return Param(name, tokens, schema, description + note, metavar="TOKENS")


def choice_param(
    name: str, description: str, values: Sequence[str], *, default: str | None = None, shown: str | None = None,
    metavar: str | None = None,
) -> Param:  # fmt: skip
    schema = {"type": "string", "enum": list(values)}
    return Param(name, choice(values, shown), schema, description, default=default, metavar=metavar)


def bool_param(name: str, description: str, *, default: bool | None = False) -> Param:
    schema = {"type": "string", "enum": BOOLEAN_WORDS}
    doc = None if default is None else "1" if default else "0"
    return Param(name, boolean, schema, description, default=default, default_doc=doc)


def names_param(name: str, description: str, values: Sequence[str], max_length: int, *, noun: str,
                **kw: Any) -> Param:  # fmt: skip
    one = f"({'|'.join(values)})"
    schema = {"type": "string", "maxLength": max_length, "pattern": f"^{one}(,{one})*$"}
    return Param(name, names(values, max_length, noun), schema, description, **kw)


# -- the search's filters -------------------------------------------------------------------

AUTHOR_PATTERN = REPO_PART  # an owner as the hub allows it
REPO_ID = r"[^/\x00]+/[^/\x00]+"

FILTER_PARAMS: tuple[Param, ...] = (
    text_param("q", "Free text: every word must occur in the repo id, path, name, tags or description.",
               metavar="TEXT"),
    Param("author", pattern(AUTHOR_PATTERN, f"a user or organisation name ({AUTHOR_PATTERN})", MAX_TEXT),
          {"type": "string", "pattern": f"^{AUTHOR_PATTERN}$"},
          "Only repos this user or organisation owns (the repo id's part before the `/`, e.g. `bartowski`), in "
          "any ASCII case; `local` for the catalog's local folders.", metavar="NAME"),
    Param("repo", pattern(REPO_ID, "one repo id, org/name", REPO_ID_LENGTH),
          {"type": "string", "maxLength": REPO_ID_LENGTH, "pattern": f"^{REPO_ID}$"},
          "Only this repo's artifacts: its id, org/name, in any ASCII case (as the repo page finds it). A repo page "
          "lists its first artifacts; this pages through all of them, with any other filter.", metavar="ORG/NAME"),
    text_param("architecture", "general.architecture, e.g. llama; matches in any ASCII case.", metavar="A"),
    text_param("license", "The file's license, else the repo card's, e.g. apache-2.0; matches in any ASCII case.",
               metavar="L"),
    text_param("file_type", "File type label, e.g. Q4_K_M; matches in any ASCII case.", metavar="T"),
    text_param("tensor_type", "Only artifacts with at least one tensor of this ggml type, e.g. IQ2_XS.", metavar="T"),
    count_param("min_params", "At least this many parameters: K, M, B, T are thousand to trillion."),
    count_param("max_params", "At most this many parameters: K, M, B, T are thousand to trillion."),
    size_param("min_size", "At least this many bytes, all shards together: B bytes, K/KB to T/TB powers of "
               "1000, KiB to TiB powers of 1024."),
    size_param("max_size", "At most this many bytes, all shards together (the files that fit a disk or memory): "
               "B bytes, K/KB to T/TB powers of 1000, KiB to TiB powers of 1024."),
    text_param("size_label", "Size label, e.g. 7B or 8x7B; matches in any ASCII case.", metavar="L"),
    int_param("min_context", "Context length at least this."),
    int_param("expert_count", "Exactly this many experts (mixture-of-experts models).", maximum=INT_MAX),
    size_param("max_memory", "Needs at most this many bytes to run: the file (all shards) plus its f16 KV cache "
               "at `memory_context` tokens, as `facts.kv_cache` sizes it. Artifacts without a KV cache estimate "
               "never match. Units as in `max_size`."),
    tokens_param("memory_context", "The context `max_memory`, the sort by memory and each hit's `memory` size "
                 f"the KV cache for (default: {MEMORY_CONTEXT}, or the model's own context_length when that is "
                 "shorter)."),
    int_param("draft_for", "Only artifacts that can draft for this artifact (id) in speculative decoding: the "
              f"same vocabulary key (`facts.vocab_sha256`), at most {MAX_SIZE_DIFFERENCE} tokens more or fewer, "
              "and fewer parameters. An artifact without a key has none; an unknown id is not found "
              "(`artifact_not_found`). Try sorting by parameter_count:asc.", minimum=1, metavar="ID"),
    choice_param("kind", "What the file is: `model` leaves out projectors, adapters, importance matrices and "
                 "vocabularies.", KINDS),
    bool_param("with_projector", "1: only artifacts whose repo also holds a multimodal projector (an `mmproj` "
               "file, llama.cpp's --mmproj: images or audio in); 0: only those whose repo holds none. Try with "
               "`kind` model.", default=None),
    names_param("modality", "Only artifacts whose repo holds a multimodal projector that takes all of these, "
                f"comma-separated: {', '.join(MODALITIES)} (the projector's `modalities`). `kind` model with "
                "`modality` vision: the models llama.cpp can give images with --mmproj.", MODALITIES, 32,
                noun="modality", metavar="M"),
    choice_param("status", "Artifact status; `all` for every one.", STATUSES, default="indexed"),
    choice_param("verification", "Status of the latest verification.", VERIFICATION_STATUSES),
    text_param("descendant_of", "Only repos below this repo id (org/name, any case of A-Z) in the lineage graph.",
               metavar="REPO"),
    choice_param("template_severity", "Only artifacts whose chat template has a safety finding at least this "
                 "severe; clean and not-scanned artifacts never match.", SEVERITIES),
    names_param("capability", "Only artifacts whose chat templates can do all of these, comma-separated: "
                f"{', '.join(CAPABILITIES)} (see `chat_template_capabilities`); not-probed artifacts never match.",
                CAPABILITIES, 64, noun="capability", metavar="C"),
    names_param("finding", "Only artifacts with all of these llama.cpp compatibility findings, comma-separated or "
                "repeated: codes L001... (see `llama_cpp_findings` and docs/compatibility.md).", FINDING_CODES, 128,
                noun="finding code", metavar="CODE"),
    choice_param("runs_in", "Only artifacts this runtime loads: llama.cpp, no error-severity compatibility finding "
                 "(`runs_in_llama_cpp`); artifacts not checked yet never match.", RUNTIMES, metavar="RUNTIME"),
)

# The sort keys as people read them: each with its alias, then the directions.
_SORTS_SHOWN = ", ".join(
    f"{key} (or {alias})" if (alias := next((a for a, k in SORT_ALIASES.items() if k == key), None)) else key
    for key in SORT_KEYS
)
def filter_param(name: str) -> Param:
    """The search filter `name` (`FILTER_PARAMS`), for a command that takes it too."""
    return next(p for p in FILTER_PARAMS if p.name == name)


SORT_PARAM = choice_param(
    "sort", f"Sort key: {_SORTS_SHOWN}; optionally with :asc or :desc. `memory` (least first) orders by each "
    "hit's `memory` at `memory_context`, the artifacts without an estimate last in either direction; no index "
    f"holds that order, so each page sorts every match. Default: {DEFAULT_SORT}, most first.",
    SORT_CHOICES, default=DEFAULT_SORT, metavar="KEY", shown=f"{_SORTS_SHOWN}, optionally with :asc or :desc",
)  # fmt: skip

DEFAULT_LIMIT = 20
MAX_CURSOR = 1000


@functools.cache  # the same declarations for every request
def paging_params(max_limit: int) -> tuple[Param, Param]:
    return (
        int_param("limit", f"Page size, 1 to {max_limit}.", minimum=1, maximum=max_limit,
                  default=min(DEFAULT_LIMIT, max_limit)),
        text_param("cursor", "Opaque cursor from a previous page's `next`.", max_length=MAX_CURSOR, metavar="C"),
    )


@functools.cache
def search_params(max_limit: int = MAX_LIMIT) -> tuple[Param, ...]:
    """The search's parameters, its pages at most `max_limit` (the server's api.max_limit) hits."""
    return (*FILTER_PARAMS, SORT_PARAM, *paging_params(min(max_limit, MAX_LIMIT)))


FACETS_PARAM = names_param(
    "facets", "The facets to count, comma-separated, in the order the answer lists them. Besides the four counted "
    "by default: `kind` (what the file is), `capability` (what its chat templates can do: an artifact counts under "
    "each one it has, and nowhere when it has none or was not probed) and `verification` (its latest "
    "verification's status; `unknown`: never verified).", FACET_NAMES, 128, noun="facet",
    default=FACETS, default_doc=",".join(FACETS), metavar="NAMES",
)  # fmt: skip

# -- one artifact, a repo's tree, the lists of crawls and jobs ------------------------------

# How `memory_estimate` runs the model, as llama.cpp's options of those names do.
MEMORY_OPTION_PARAMS: tuple[Param, ...] = (
    int_param("batch", "Tokens llama.cpp takes in one pass (n_batch and n_ubatch) for `memory_estimate`.",
              minimum=1, maximum=1 << 16, default=512),
    choice_param("cache_type", "The KV cache's type for `memory_estimate` (q8_0 and q4_0 turn flash attention on).",
                 tuple(CACHE_TYPES), default="f16"),
    bool_param("flash_attention", "Size `memory_estimate` with flash attention.", default=False),
)  # fmt: skip


def memory_options(args: Mapping[str, Any]) -> dict[str, Any]:
    """The estimate's options among parsed query arguments (`MEMORY_OPTION_PARAMS`)."""
    return {p.name: args[p.name] for p in MEMORY_OPTION_PARAMS if args.get(p.name) is not None}


DETAIL_PARAMS: tuple[Param, ...] = (
    tokens_param("context", "Size `memory`, `memory_estimate` and the KV cache (`facts.kv_cache.at_context`) for "
                 f"this context instead of {MEMORY_CONTEXT}, or the model's own context_length when that is "
                 "shorter; each says the tokens it is sized at."),
    *MEMORY_OPTION_PARAMS,
)  # fmt: skip

# A page of an artifact's tensor table (`/v1/artifacts/{id}/tensors`, the artifact page).
TENSOR_PAGE_SIZE, MAX_TENSOR_PAGE = 100, 1000
TENSOR_PARAMS: tuple[Param, ...] = (
    int_param("offset", "Tensors to skip (of those the name filter keeps), in file order.", default=0),
    int_param("limit", f"Tensors on the page, 1 to {MAX_TENSOR_PAGE}.", minimum=1, maximum=MAX_TENSOR_PAGE,
              default=TENSOR_PAGE_SIZE),
    text_param("name", "Only tensors whose name holds this text, in any ASCII case (e.g. blk.0., attn_q)."),
)  # fmt: skip

LINEAGE_PARAMS: tuple[Param, ...] = (
    choice_param("direction", "Which side of the tree to walk.", DIRECTIONS, default="both"),
    int_param("depth", f"How many edges to follow, 1 to {MAX_DEPTH}.", minimum=1, maximum=MAX_DEPTH,
              default=DEFAULT_DEPTH),
)

# The web catalog's pages of a tree layer's rest (`/tree/{org}/{name}/more`).
TREE_MORE_PARAMS: tuple[Param, ...] = (
    choice_param("side", "Which side of the tree.", ("ancestors", "descendants"), default="descendants"),
    int_param("level", f"The layer, 1 to {MAX_DEPTH} edges from the repo.", minimum=1, maximum=MAX_DEPTH, default=1),
    text_param("after", "The repo key (lower-case id) the page starts after."),
)


@functools.cache
def crawl_list_params(max_limit: int) -> tuple[Param, ...]:
    return (choice_param("status", "Only crawls in this status.", CRAWL_STATUSES), *paging_params(max_limit))


@functools.cache
def verification_list_params(max_limit: int) -> tuple[Param, ...]:
    return (
        choice_param("status", "Only verifications in this status.", VERIFICATION_STATUSES),
        int_param("artifact", "Only the verifications of this artifact id.", minimum=1),
        *paging_params(max_limit),
    )


@functools.cache
def job_list_params(max_limit: int) -> tuple[Param, ...]:
    return (choice_param("status", "Only jobs in this state.", JOB_STATES), *paging_params(max_limit))


__all__ = [
    "BOOLEAN_WORDS",
    "DETAIL_PARAMS",
    "FACETS_PARAM",
    "FILTER_PARAMS",
    "LINEAGE_PARAMS",
    "MEMORY_OPTION_PARAMS",
    "NOT_BLANK",
    "SORT_PARAM",
    "TENSOR_PARAMS",
    "TREE_MORE_PARAMS",
    "BadValue",
    "Param",
    "boolean",
    "crawl_list_params",
    "filter_param",
    "integer",
    "job_list_params",
    "memory_options",
    "paging_params",
    "search_params",
    "text",
    "tokens",
    "verification_list_params",
]  # fmt: skip
