"""Prometheus metrics in the text exposition format, without a client library.

The few instrument types the service needs (counter, gauge, histogram with fixed
buckets) are small enough to own, and owning them keeps every metric on an object the
app creates: no process-wide default registry that two apps in one test would share.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from registry.catalog.stats import CatalogStats

LabelValues = tuple[str, ...]

DEFAULT_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _fmt(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def _labels(names: Sequence[str], values: Sequence[str], extra: str = "") -> str:
    parts = [f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


@dataclass
class _Metric:
    name: str
    help: str
    labelnames: tuple[str, ...] = ()
    kind: str = "untyped"

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"bad metric name {self.name!r}")

    def _key(self, labels: Sequence[str]) -> LabelValues:
        if len(labels) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {tuple(labels)}")
        return tuple(str(v) for v in labels)

    def header(self) -> Iterator[str]:
        yield f"# HELP {self.name} {_escape(self.help)}"
        yield f"# TYPE {self.name} {self.kind}"

    def samples(self) -> Iterator[str]:  # pragma: no cover - overridden
        return iter(())


@dataclass
class Counter(_Metric):
    kind: str = "counter"
    _values: dict[LabelValues, float] = field(default_factory=dict)

    def inc(self, *labels: str, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("a counter only goes up")
        key = self._key(labels)
        self._values[key] = self._values.get(key, 0.0) + amount

    def value(self, *labels: str) -> float:
        return self._values.get(self._key(labels), 0.0)

    def samples(self) -> Iterator[str]:
        for key, value in sorted(self._values.items()):
            yield f"{self.name}{_labels(self.labelnames, key)} {_fmt(value)}"


@dataclass
class Gauge(_Metric):
    kind: str = "gauge"
    _values: dict[LabelValues, float] = field(default_factory=dict)

    def set(self, value: float, *labels: str) -> None:
        self._values[self._key(labels)] = float(value)

    def inc(self, *labels: str, amount: float = 1.0) -> None:
        key = self._key(labels)
        self._values[key] = self._values.get(key, 0.0) + amount

    def dec(self, *labels: str, amount: float = 1.0) -> None:
        self.inc(*labels, amount=-amount)

    def value(self, *labels: str) -> float:
        return self._values.get(self._key(labels), 0.0)

    def samples(self) -> Iterator[str]:
        if not self.labelnames and not self._values:
            yield f"{self.name} 0"
        for key, value in sorted(self._values.items()):
            yield f"{self.name}{_labels(self.labelnames, key)} {_fmt(value)}"


@dataclass
class Histogram(_Metric):
    kind: str = "histogram"
    buckets: tuple[float, ...] = DEFAULT_BUCKETS
    # per label set: bucket counts (not cumulative), sum, count
    _series: dict[LabelValues, tuple[list[int], list[float]]] = field(default_factory=dict)

    def observe(self, value: float, *labels: str) -> None:
        key = self._key(labels)
        counts, total = self._series.setdefault(key, ([0] * (len(self.buckets) + 1), [0.0]))
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                counts[i] += 1
                break
        else:
            counts[-1] += 1
        total[0] += value

    def count(self, *labels: str) -> int:
        series = self._series.get(self._key(labels))
        return sum(series[0]) if series else 0

    def samples(self) -> Iterator[str]:
        for key, (counts, total) in sorted(self._series.items()):
            running = 0
            for bound, n in zip((*self.buckets, math.inf), counts, strict=True):
                running += n
                le = f'le="{_fmt(bound)}"'
                yield f"{self.name}_bucket{_labels(self.labelnames, key, le)} {running}"
            yield f"{self.name}_sum{_labels(self.labelnames, key)} {_fmt(total[0])}"
            yield f"{self.name}_count{_labels(self.labelnames, key)} {running}"


class Registry:
    """An ordered set of metrics rendered together."""

    def __init__(self) -> None:
        self._metrics: dict[str, _Metric] = {}

    def _add(self, metric: _Metric) -> None:
        if metric.name in self._metrics:
            raise ValueError(f"metric {metric.name} registered twice")
        self._metrics[metric.name] = metric

    def counter(self, name: str, help: str, labelnames: Sequence[str] = ()) -> Counter:
        metric = Counter(name, help, tuple(labelnames))
        self._add(metric)
        return metric

    def gauge(self, name: str, help: str, labelnames: Sequence[str] = ()) -> Gauge:
        metric = Gauge(name, help, tuple(labelnames))
        self._add(metric)
        return metric

    def histogram(
        self, name: str, help: str, labelnames: Sequence[str] = (), buckets: Sequence[float] = DEFAULT_BUCKETS
    ) -> Histogram:
        metric = Histogram(name, help, tuple(labelnames), buckets=tuple(sorted(buckets)))
        self._add(metric)
        return metric

    def render(self) -> str:
        lines: list[str] = []
        for metric in self._metrics.values():
            lines.extend(metric.header())
            lines.extend(metric.samples())
        return "\n".join(lines) + "\n"


class ApiMetrics:
    """The service's metrics. Workers get the same object (through the launcher) to
    report crawls, verifications and queue depth, so one /metrics shows it all."""

    def __init__(self) -> None:
        self.registry = Registry()
        r = self.registry
        self.requests = r.counter(
            "registry_http_requests_total", "HTTP requests answered.", ("method", "route", "status")
        )
        self.latency = r.histogram(
            "registry_http_request_duration_seconds", "Time to answer an HTTP request.", ("method", "route")
        )
        self.in_flight = r.gauge("registry_http_requests_in_flight", "HTTP requests being answered now.")
        self.crawls_started = r.counter("registry_crawls_started_total", "Crawls started through the API.", ("kind",))
        self.crawls = r.counter("registry_crawls_total", "Crawls that reached a status.", ("status",))
        self.webhooks = r.counter(
            "registry_webhooks_total", "Hub webhook deliveries accepted: a crawl started, or ignored.", ("outcome",)
        )
        self.crawled_repos = r.counter("registry_crawled_repos_total", "Repos visited by crawls.")
        self.verifications = r.counter(
            "registry_verifications_total", "Verifications that reached a status.", ("status",)
        )
        self.queue_depth = r.gauge("registry_queue_depth", "Jobs waiting in the queue.", ("queue",))
        # What the catalog holds, read from the database at each scrape (the same in every process).
        self.catalog_ok = r.gauge(
            "registry_catalog_stats_ok", "1 when this scrape read the catalog's counts below, 0 when it could not."
        )
        self.catalog_artifacts = r.gauge("registry_catalog_artifacts", "Artifacts in the catalog.", ("status",))
        self.catalog_verified = r.gauge(
            "registry_catalog_artifacts_verified", "Artifacts by the status of their latest verification.", ("status",)
        )
        self.catalog_repos = r.gauge("registry_catalog_repos", "Repos in the catalog (hub repos and local folders).")
        self.catalog_stale = r.gauge(
            "registry_catalog_repos_derived_before",
            "Repos an older release wrote: the next crawl or index that names each reads it again.",
        )
        self.crawls_running = r.gauge("registry_crawls_running", "Crawls started and not ended.")
        self.last_crawl_end = r.gauge(
            "registry_last_crawl_end_timestamp_seconds",
            "When a crawl last ended in this status (Unix time): alert when `finished` grows old.",
            ("status",),
        )

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.inc(method, route, str(status))
        self.latency.observe(seconds, method, route)

    # Hooks for the workers; kept as methods so callers need not know metric names.
    def crawl_finished(self, status: str, repos: int = 0) -> None:
        self.crawls.inc(status)
        if repos:
            self.crawled_repos.inc(amount=repos)

    def verification_finished(self, status: str) -> None:
        self.verifications.inc(status)

    def set_queue_depth(self, queue: str, depth: int) -> None:
        self.queue_depth.set(depth, queue)

    def set_catalog(self, stats: CatalogStats | None) -> None:
        """The catalog's counts from one scrape; None: they could not be read this time."""
        self.catalog_ok.set(0 if stats is None else 1)
        if stats is None:
            return
        for metric, counts in ((self.catalog_artifacts, stats.artifacts), (self.catalog_verified, stats.verified)):
            for label, n in counts.items():
                metric.set(n, label)
        self.catalog_repos.set(stats.repos)
        self.catalog_stale.set(stats.repos_derived_before)
        self.crawls_running.set(stats.crawls_running)
        for status, at in stats.last_crawl_end.items():
            self.last_crawl_end.set(at.timestamp(), status)

    def render(self) -> str:
        return self.registry.render()
