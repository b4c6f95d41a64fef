"""Numbers and times as people read them."""

from __future__ import annotations

from datetime import UTC, datetime


def size(n: int | None) -> str:
    if n is None:
        return "–"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError


def count(n: int | None) -> str:
    if n is None:
        return "–"
    for limit, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= limit:
            return f"{n / limit:.1f}{suffix}"
    return str(n)


def tokens(n: int) -> str:
    """A context as runners spell it: 4K, 32K, 128K; other counts as they are."""
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else f"{n:,}"


def when(t: datetime | None) -> str:
    """A time to the second, in UTC: 2026-12-05 08:42:05 UTC."""
    if t is None:
        return "–"
    return (t.astimezone(UTC) if t.tzinfo else t).strftime("%Y-%m-%d %H:%M:%S UTC")
