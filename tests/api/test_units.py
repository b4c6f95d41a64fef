"""Small pieces without a server: metrics rendering, parameter parsers, cursors."""

from __future__ import annotations

import pytest

from registry.api.cursors import decode_id_cursor, encode_id_cursor
from registry.api.errors import InvalidParameter
from registry.api.metrics import ApiMetrics, Registry
from registry.api.params import boolean, choice, integer, text


def test_registry_renders_prometheus_text() -> None:
    r = Registry()
    c = r.counter("jobs_total", "Jobs done.", ("kind",))
    g = r.gauge("depth", "Queue depth.")
    h = r.histogram("latency_seconds", "Latency.", ("route",), buckets=(0.1, 1.0))
    c.inc("a")
    c.inc("a", amount=2)
    c.inc('we"ird\n')
    h.observe(0.05, "/x")
    h.observe(0.5, "/x")
    h.observe(5.0, "/x")
    text_ = r.render()
    assert "# HELP jobs_total Jobs done.\n# TYPE jobs_total counter\n" in text_
    assert 'jobs_total{kind="a"} 3\n' in text_
    assert 'jobs_total{kind="we\\"ird\\n"} 1\n' in text_
    assert "depth 0\n" in text_
    assert 'latency_seconds_bucket{route="/x",le="0.1"} 1\n' in text_
    assert 'latency_seconds_bucket{route="/x",le="1"} 2\n' in text_
    assert 'latency_seconds_bucket{route="/x",le="+Inf"} 3\n' in text_
    assert 'latency_seconds_sum{route="/x"} 5.55\n' in text_
    assert 'latency_seconds_count{route="/x"} 3\n' in text_
    g.set(4)
    assert "depth 4\n" in r.render()
    with pytest.raises(ValueError):
        c.inc("a", amount=-1)
    with pytest.raises(ValueError):
        c.inc()
    with pytest.raises(ValueError):
        r.counter("jobs_total", "again")


def test_worker_hooks() -> None:
    m = ApiMetrics()
    m.crawl_finished("finished", repos=3)
    m.verification_finished("passed")
    m.set_queue_depth("crawl", 7)
    out = m.render()
    assert 'registry_crawls_total{status="finished"} 1' in out
    assert "registry_crawled_repos_total 3" in out
    assert 'registry_verifications_total{status="passed"} 1' in out
    assert 'registry_queue_depth{queue="crawl"} 7' in out


@pytest.mark.parametrize("raw", ["1_000", " 12", "1e3", "0x10", "", "-", "9" * 21])
def test_integer_accepts_plain_digits_only(raw: str) -> None:
    with pytest.raises(InvalidParameter) as info:
        integer(0)("n", raw)
    assert info.value.details["parameter"] == "n"


def test_parsers() -> None:
    assert integer(1, 5)("n", "5") == 5
    assert boolean("b", "TRUE") is True and boolean("b", "0") is False
    assert choice(["a", "b"])("c", "b") == "b"
    assert text(4)("t", " ab ") == "ab"
    with pytest.raises(InvalidParameter):
        boolean("b", "maybe")
    with pytest.raises(InvalidParameter):
        text(3)("t", "abcd")


def test_id_cursor_round_trip_and_garbage() -> None:
    assert decode_id_cursor(encode_id_cursor(42)) == 42
    for bad in ("", "!!", "bm9wZQ", encode_id_cursor(0), "eyJpZCI6dHJ1ZX0", "é"):
        with pytest.raises(InvalidParameter):
            decode_id_cursor(bad)
