"""Small pieces without a server: metrics rendering, parameter parsers, cursors."""

from __future__ import annotations

import pytest

from registry.api.cursors import decode_id_cursor, encode_id_cursor
from registry.api.errors import InvalidParameter
from registry.api.metrics import ApiMetrics, Registry
from registry.responses.params import BadValue, boolean, choice, integer, text, tokens


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


@pytest.mark.parametrize(
    "raw", ["1_000", " 12", "1e3", "0x10", "", "-", "9" * 21, "\uff11", "\u0661", "-\uff11"]  # full-width, Arabic-Indic
)
def test_integer_accepts_plain_digits_only(raw: str) -> None:
    with pytest.raises(BadValue) as info:
        integer(0)("n", raw)
    assert info.value.name == "n"


def test_parsers() -> None:
    assert integer(1, 5)("n", "5") == 5
    assert boolean("b", "TRUE") is True and boolean("b", "0") is False
    assert choice(["a", "b"])("c", "b") == "b"
    assert text(4)("t", " ab ") == "ab"
    with pytest.raises(BadValue):
        boolean("b", "maybe")
    with pytest.raises(BadValue):
        text(3)("t", "abcd")


@pytest.mark.parametrize(("raw", "count"), [("8192", 8192), ("8K", 8192), ("8k", 8192), ("32K", 32768),
                                            ("1M", 1 << 20), ("1m", 1 << 20), ("999999M", 999999 << 20),
                                            (str(1 << 40), 1 << 40), (str((1 << 40) + 1), 1 << 40), ("1048577M", 1 << 40)])  # fmt: skip
def test_tokens_count_as_contexts_are_counted(raw: str, count: int) -> None:
    assert tokens("context", raw) == count


@pytest.mark.parametrize("raw", ["0", "-1", "8X", "1.5K", "8 K", "K", "", "08K", "\uff18K", "1" * 14, "0x10"])
def test_tokens_refuse_what_is_not_a_context(raw: str) -> None:
    with pytest.raises(BadValue) as info:
        tokens("context", raw)
    assert info.value.name == "context"


def test_id_cursor_round_trip_and_garbage() -> None:
    assert decode_id_cursor(encode_id_cursor(42)) == 42
    for bad in ("", "!!", "bm9wZQ", encode_id_cursor(0), "eyJpZCI6dHJ1ZX0", "é"):
        with pytest.raises(InvalidParameter):
            decode_id_cursor(bad)


def test_json_bodies_hold_every_value_a_catalog_can() -> None:
    import json
    from pathlib import PurePosixPath

    from registry.api.replies import json_response
    from registry.responses import encode

    body = {"n": 2**64 - 1, "neg": -(2**63), "f": 0.5, "text": "naïve ✓", 3: "int key", "path": PurePosixPath("a/b")}
    assert json.loads(encode(body)) == {"n": 2**64 - 1, "neg": -(2**63), "f": 0.5, "text": "naïve ✓", "3": "int key",
                                        "path": "a/b"}  # fmt: skip
    assert json.loads(encode({"nan": float("nan"), "inf": float("inf")})) == {"nan": None, "inf": None}
    # A string with no UTF-8 form falls back to the standard encoder's escapes: nothing is lost, nothing is a 500.
    assert json.loads(encode({"lone": "\ud800x", "big": 2**70})) == {"lone": "\ud800x", "big": 2**70}
    response = json_response({"a": [1]}, status=201, headers={"X-Test": "1"})
    assert (response.status, response.content_type, response.headers["X-Test"]) == (201, "application/json", "1")
    assert response.body == b'{"a":[1]}'
