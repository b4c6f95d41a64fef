"""Verifications, crawls, jobs, the system routes and the error envelope."""

from __future__ import annotations

import math
from typing import Annotated, Any

from registry.responses.base import (
    CrawlKind,
    CrawlStatus,
    JobKind,
    JobState,
    Response,
    Time,
    VerificationStatus,
    doc,
    one_of,
)


def finite(value: float | None) -> float | None:
    """JSON has no NaN or infinity: a diverged perplexity is reported as null."""
    return value if value is not None and math.isfinite(value) else None


class Verification(Response, kw_only=True):
    """One verification run of an artifact: downloaded, hashed, every tensor dequantized, a smoke inference."""

    id: int
    artifact_id: int
    status: VerificationStatus
    reason: str | None
    sha256: Annotated[str | None, doc("sha256 of the (first) file, as taken.")]
    tensors_checked: int | None
    nonfinite_values: int | None
    perplexity: float | None
    generated: Annotated[str | None, doc("The greedy continuation of the smoke prompt.")]
    details: Annotated[dict[str, Any], doc("The rest of the run's report: message, every shard's sha256, "
                                           "per-tensor statistics, speeds, memory.")]  # fmt: skip
    timings: Annotated[dict[str, float], doc("Seconds per stage.")]
    queued_at: Time
    started_at: Time | None
    finished_at: Time | None
    url: str

    @classmethod
    def from_row(cls, row: Any) -> Verification:
        """From a verifications row (ORM object or plain row) by column name."""
        return cls(
            id=row.id, artifact_id=row.artifact_id, status=row.status, reason=row.reason, sha256=row.sha256,
            tensors_checked=row.tensors_checked, nonfinite_values=row.nonfinite_values,
            perplexity=finite(row.perplexity), generated=row.generated, details=row.details or {},
            timings=row.timings or {}, queued_at=row.queued_at, started_at=row.started_at,
            finished_at=row.finished_at, url=f"/v1/verifications/{row.id}",
        )  # fmt: skip


class VerificationPage(Response, kw_only=True):
    items: list[Verification]
    next: Annotated[str | None, doc("Cursor of the next page; null on the last page.")]
    limit: int


class Crawl(Response, kw_only=True):
    """One crawl run of a source: what it was asked, what it counted, what went wrong."""

    id: int
    kind: CrawlKind
    status: CrawlStatus
    parameters: Annotated[dict[str, Any], doc("What the crawl was asked: source, repos, author, search, limit, "
                                              "full (a local crawl: paths).")]  # fmt: skip
    counters: Annotated[dict[str, Any], doc("Repos seen, indexed, unchanged, failed, ...; files, bytes and "
                                            "requests; headers read from a sibling's (`sibling_reads`) and "
                                            "sibling reads that fell back to a full read "
                                            "(`sibling_fallbacks`).")]  # fmt: skip
    errors: Annotated[list[dict[str, Any]], doc("What failed: {repo, path, error} each, the first 100.")]
    started_at: Time
    heartbeat_at: Time | None
    finished_at: Time | None
    url: str

    @classmethod
    def from_row(cls, row: Any) -> Crawl:
        return cls(
            id=row.id, kind=row.kind, status=row.status, parameters=row.parameters or {},
            counters=row.counters or {}, errors=row.errors or [], started_at=row.started_at,
            heartbeat_at=row.heartbeat_at, finished_at=row.finished_at, url=f"/v1/crawls/{row.id}",
        )  # fmt: skip


class CrawlPage(Response, kw_only=True):
    items: list[Crawl]
    next: Annotated[str | None, doc("Cursor of the next page; null on the last page.")]
    limit: int


class Job(Response, kw_only=True):
    """One job of either runner (the embedded pool, procrastinate)."""

    id: int
    kind: JobKind
    queue: str
    status: JobState
    args: Annotated[dict[str, Any], doc("The job function's arguments (crawl_id, repo_id, verification_id).")]
    attempts: int
    error: str | None
    created_at: Time | None
    started_at: Time | None
    finished_at: Time | None
    url: str

    @classmethod
    def from_info(cls, job: Any) -> Job:
        """From a runner's `JobInfo` by field name."""
        return cls(
            id=job.id, kind=job.kind, queue=job.queue, status=job.status, args=job.args, attempts=job.attempts,
            error=job.error, created_at=job.created_at, started_at=job.started_at, finished_at=job.finished_at,
            url=f"/v1/jobs/{job.id}",
        )  # fmt: skip


class JobPage(Response, kw_only=True):
    items: list[Job]
    next: Annotated[str | None, doc("Cursor of the next page; null on the last page.")]
    limit: int


class Health(Response, kw_only=True):
    status: Annotated[str, one_of(("ok",))]


class ReadyChecks(Response, kw_only=True):
    database: Annotated[str, one_of(("ok",))]


class Ready(Response, kw_only=True):
    status: Annotated[str, one_of(("ready",))]
    checks: ReadyChecks


class ErrorBody(Response, kw_only=True):
    code: Annotated[str, doc("Stable machine-readable code, e.g. invalid_parameter.")]
    message: Annotated[str, doc("Human-readable explanation.")]
    details: Annotated[dict[str, Any], doc("Structured context: `parameter`, `field`, `allowed`...")]


class Error(Response, kw_only=True):
    """Every error the API answers."""

    error: ErrorBody


class WebhookEvent(Response, kw_only=True):
    action: str
    scope: str


class WebhookIgnored(Response, kw_only=True):
    """A hub webhook delivery that asks for no crawl."""

    ignored: Annotated[str, doc("Why the delivery asks for no crawl.")]
    event: WebhookEvent


__all__ = [
    "Crawl", "CrawlPage", "Error", "ErrorBody", "Health", "Job", "JobPage", "Ready", "ReadyChecks", "Verification",
    "WebhookEvent", "WebhookIgnored", "finite",
]  # fmt: skip
