"""What every response model shares: the base class, descriptions, enumerations, the
summary of an oversized value, and the one JSON encoder of every body.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from registry.responses import vocab


class Response(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, gc=False):
    """A response body or a part of one. Built by keyword only, every field named; encoded
    by `encode`. `forbid_unknown_fields` closes the object in its JSON Schema
    (`additionalProperties: false`); `gc=False`: a body never holds a reference cycle, and
    the garbage collector need not track the thousands of them a page holds."""


# A point in time: RFC 3339, in UTC ("2026-01-02T03:04:05Z").
Time = Annotated[datetime, Meta(extra_json_schema={"format": "date-time"})]


def doc(text: str) -> Meta:
    """A field's description in the JSON Schema: `Annotated[int, doc("...")]`."""
    return Meta(description=text)


def one_of(values: Sequence[str], name: str | None = None) -> Meta:
    """A string that is one of `values` (a JSON Schema enum). A `name` makes it a schema of
    its own in /openapi.json, referenced wherever it is used: one enum type in a client."""
    extra: dict[str, Any] = {"enum": list(values)}
    if name is not None:
        extra[ENUM_NAME] = name
    return Meta(extra_json_schema=extra)


ENUM_NAME = "x-enum-name"  # `schema` moves an enum so marked into a component of this name


ArtifactStatus = Annotated[str, one_of(vocab.ARTIFACT_STATUSES, "ArtifactStatus")]
VerificationStatus = Annotated[str, one_of(vocab.VERIFICATION_STATUSES, "VerificationStatus")]
Severity = Annotated[str, one_of(vocab.SEVERITIES, "Severity")]
Capability = Annotated[str, one_of(vocab.CAPABILITIES, "Capability")]
Kind = Annotated[str, one_of(vocab.KINDS, "Kind")]
Modality = Annotated[str, one_of(vocab.MODALITIES, "Modality")]
RepoSource = Annotated[str, one_of(vocab.REPO_SOURCES, "RepoSource")]
LineageRelation = Annotated[str, one_of(vocab.LINEAGE_RELATIONS, "LineageRelation")]
LineageSource = Annotated[str, one_of(vocab.LINEAGE_SOURCES, "LineageSource")]
Direction = Annotated[str, one_of(vocab.DIRECTIONS, "Direction")]
CrawlKind = Annotated[str, one_of(vocab.CRAWL_KINDS, "CrawlKind")]
CrawlStatus = Annotated[str, one_of(vocab.CRAWL_STATUSES, "CrawlStatus")]
JobKind = Annotated[str, one_of(vocab.JOB_KINDS, "JobKind")]
JobState = Annotated[str, one_of(vocab.JOB_STATES, "JobState")]


class Summary(Response, kw_only=True):
    """A value too long to inline (a long array, a huge string), summarised."""

    summary: Annotated[str, one_of(("array", "string"))]
    length: int
    head: Annotated[list[Any] | str, doc("The first items (8) of an array; the first 256 characters of a string.")]


# Values longer than these (huge strings, arrays that slipped through) are summarised: a
# page must stay small whatever a file's header holds.
MAX_INLINE_ITEMS = 64
MAX_INLINE_CHARS = 4096


def summarised(value: Any) -> Any:
    """A JSON value small enough to inline: long arrays and strings become a `Summary`, in
    objects and arrays too."""
    if isinstance(value, list | tuple):
        if len(value) <= MAX_INLINE_ITEMS:
            return [summarised(v) for v in value]
        return Summary(summary="array", length=len(value), head=[summarised(v) for v in value[:8]])
    if isinstance(value, str) and len(value) > MAX_INLINE_CHARS:
        return Summary(summary="string", length=len(value), head=value[:256])
    if isinstance(value, dict):
        return {str(k): summarised(v) for k, v in value.items()}
    return value


def _other(value: Any) -> Any:
    # A value with no JSON form of its own (a Path, a Decimal in a metadata dict): its text.
    return str(value)


_ENCODER = msgspec.json.Encoder(enc_hook=_other)


def encode(body: Any) -> bytes:
    """The JSON of a body, UTF-8; `null` for a float JSON cannot hold (NaN, infinity).

    A string with a lone surrogate (which has no UTF-8 form) falls back to the standard
    encoder's `\\ud800` escape, so one odd value in a file's metadata never turns a page
    into an error."""
    try:
        return _ENCODER.encode(body)
    except UnicodeEncodeError:
        return json.dumps(msgspec.to_builtins(body, enc_hook=_other), default=str).encode()


def encode_text(body: Any) -> str:
    """`encode` as text: what the command line prints."""
    return encode(body).decode("utf-8", errors="surrogatepass")


__all__ = ["MAX_INLINE_CHARS", "MAX_INLINE_ITEMS", "Response", "Summary", "Time", "doc", "encode", "encode_text", "one_of",
           "summarised"]  # fmt: skip
