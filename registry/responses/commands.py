"""Bodies the command line prints that no route answers: what `registry index`, `identify`
and `verify` report of local files. Their parts are the API's models where the two meet
(a file's matches, a recorded verification).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from registry.responses.artifacts import FileMatch
from registry.responses.base import Response, VerificationStatus, doc, one_of
from registry.responses.operations import Verification


class IndexedFile(Response, kw_only=True):
    """One artifact `registry index` read: written, unchanged since the catalog last read it, or an error row."""

    repo: str
    path: str
    status: Annotated[str, one_of(("indexed", "unchanged", "error"))]
    error: Annotated[str | None, doc("`code: message` of an error row.")]


class Namesake(Response, kw_only=True):
    """An indexed artifact whose file has the name of a file the catalog does not know by its bytes."""

    repo: str
    path: str
    id: int


class Identified(Response, kw_only=True):
    """A local file and the catalog's files with the same bytes (as GET /v1/files/{sha256} lists them)."""

    path: str
    sha256: str
    count: int
    files: list[FileMatch]
    same_name: Annotated[list[Namesake], doc("With no file of the same bytes: indexed artifacts of the same "
                                             "file name, most downloaded first.")]  # fmt: skip


class VerifyReport(Response, kw_only=True):
    """One verification's full report: what `registry verify --json` prints, and what a recorded
    verification keeps in `details` (but the fields it has columns for)."""

    status: VerificationStatus
    reason: str | None
    message: str | None
    sha256: Annotated[list[str], doc("Of each file, in split order.")]
    bytes_downloaded: int
    peak_rss_bytes: int | None
    kept_matrices: int
    timings: dict[str, float]
    architecture: str | None
    tensors_checked: int
    nonfinite_values: int
    perplexity: float | None
    text_tokens: int | None
    prompt: str | None
    generated_tokens: list[int]
    generated_text: str | None
    prompt_tokens_per_second: float | None
    tokens_per_second: float | None
    tensors: Annotated[list[dict[str, Any]] | msgspec.UnsetType, doc("Per-tensor statistics, when asked for.")] = (
        msgspec.UNSET
    )
    verification: Annotated[
        Verification | msgspec.UnsetType | None,
        doc("The catalog's record of this run, when the file verified is a catalog artifact's (null: it is not, "
            "or it changed since it was indexed)."),
    ] = msgspec.UNSET

    @classmethod
    def from_result(cls, result: Any, *, tensors: bool = False) -> VerifyReport:
        """From a `workers.verify.VerifyResult` (and its check report) by field name."""
        r = result.report
        checked = r is not None
        return cls(
            status=result.status, reason=result.reason, message=result.message, sha256=list(result.sha256),
            bytes_downloaded=result.bytes_downloaded, peak_rss_bytes=r.peak_rss_bytes if checked else None,
            kept_matrices=r.kept_matrices if checked else 0, timings=dict(result.timings),
            architecture=r.architecture if checked else None, tensors_checked=r.tensors_checked if checked else 0,
            nonfinite_values=r.nonfinite_values if checked else 0, perplexity=r.perplexity if checked else None,
            text_tokens=r.text_tokens if checked else None, prompt=r.prompt if checked else None,
            generated_tokens=list(r.generated_tokens) if checked else [],
            generated_text=r.generated_text if checked else None,
            prompt_tokens_per_second=r.prompt_tokens_per_second if checked else None,
            tokens_per_second=r.tokens_per_second if checked else None,
            tensors=[dict(vars(t)) for t in r.tensors] if tensors and checked else (
                [] if tensors else msgspec.UNSET),
        )  # fmt: skip


__all__ = ["Identified", "IndexedFile", "Namesake", "VerifyReport"]
