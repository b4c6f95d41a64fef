"""When to run periodic jobs: `every 6h` intervals and 5-field cron expressions, and a runner.

`parse_schedule` turns the `[schedule]` settings text into a `Schedule` with one method,
`next_after(moment)`. `run_schedule` is a plain async loop that sleeps until the next
moment and awaits the job; the embedded `registry serve` runs it as a task, and the
distributed mode's workers register the same schedule as a procrastinate periodic task
(`workers.jobs.schedule_cron`). Cron expressions are read in UTC, as a server's schedule should not move with the
machine's time zone or jump at daylight saving changes.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

log = logging.getLogger(__name__)

_EVERY = re.compile(r"^every\s+(\d+)\s*(s|sec|secs|seconds?|m|min|mins|minutes?|h|hours?|d|days?)$", re.I)
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# Far enough to find any valid expression's next time (Feb 29 on a Monday: 28 years);
# an expression that never fires (Feb 30) is refused when it is parsed.
_SEARCH_DAYS = 366 * 29
MIN_INTERVAL_S = 60  # a crawl more often than once a minute is a typo, not a schedule


class ScheduleError(ValueError):
    """A schedule text that is neither `every N<unit>` nor a valid 5-field cron expression."""


class Schedule(Protocol):
    @property
    def text(self) -> str:
        """The schedule as written in the settings."""
        ...

    def next_after(self, moment: datetime) -> datetime:
        """The first run time strictly after `moment` (timezone-aware, UTC)."""
        ...


@dataclass(frozen=True)
class Every:
    """Every N seconds, at whole multiples of N since the Unix epoch (`every 6h`: 00:00,
    06:00, 12:00 and 18:00 UTC, as the distributed mode's cron `0 */6 * * *`).

    Counting from the process start instead would put the next run a whole interval after
    every restart: a server restarted more often than its interval would never crawl.
    """

    text: str
    seconds: int

    def next_after(self, moment: datetime) -> datetime:
        since_epoch = math.floor(moment.timestamp())
        return datetime.fromtimestamp((since_epoch // self.seconds + 1) * self.seconds, UTC)


@dataclass(frozen=True)
class Cron:
    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]  # of the month, 1..31
    months: frozenset[int]  # 1..12
    weekdays: frozenset[int]  # 0..6, Sunday 0
    any_day: bool  # day-of-month field was "*"
    any_weekday: bool  # day-of-week field was "*"

    def _day_matches(self, t: datetime) -> bool:
        dom = t.day in self.days
        dow = (t.isoweekday() % 7) in self.weekdays
        # Classic cron: when both day fields are restricted, either one matching is enough.
        if not self.any_day and not self.any_weekday:
            return dom or dow
        return dom and dow

    def next_after(self, moment: datetime) -> datetime:
        t = moment.astimezone(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
        limit = t + timedelta(days=_SEARCH_DAYS)
        while t < limit:
            if t.month not in self.months or not self._day_matches(t):
                t = (t + timedelta(days=1)).replace(hour=0, minute=0)
            elif t.hour not in self.hours:
                t = (t + timedelta(hours=1)).replace(minute=0)
            elif t.minute not in self.minutes:
                t += timedelta(minutes=1)
            else:
                return t
        raise ScheduleError(f"cron expression {self.text!r} never fires")


def _value(token: str, names: tuple[str, ...], offset: int) -> int:
    if token.lower() in names:
        return names.index(token.lower()) + offset
    if not token.isdigit():
        raise ScheduleError(f"not a number: {token!r}")
    return int(token)


def _field(text: str, lo: int, hi: int, names: tuple[str, ...] = (), offset: int = 0) -> frozenset[int]:
    """One cron field: `*`, `N`, `A-B`, any of them with `/STEP`, comma-separated."""
    out: set[int] = set()
    for part in text.split(","):
        rng, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) == 0:
                raise ScheduleError(f"bad step in {part!r}")
            step = int(step_text)
        if rng == "*":
            start, end = lo, hi
        elif "-" in rng:
            a, _, b = rng.partition("-")
            start, end = _value(a, names, offset), _value(b, names, offset)
        else:
            start = _value(rng, names, offset)
            end = hi if step_text else start  # "5/15" means from 5 to the end by 15
        if not lo <= start <= end <= hi:
            raise ScheduleError(f"{part!r} is outside {lo}-{hi}")
        out.update(range(start, end + 1, step))
    return frozenset(out)


def parse_cron(text: str) -> Cron:
    parts = text.split()
    if len(parts) != 5:
        raise ScheduleError(
            f"a cron expression has 5 fields (minute hour day month weekday), got {len(parts)}"
        )
    minute, hour, day, month, weekday = parts
    # Weekday 7 is Sunday too, as in most crons.
    weekdays = frozenset(d % 7 for d in _field(weekday, 0, 7, _DAYS))
    cron = Cron(
        text=text,
        minutes=_field(minute, 0, 59),
        hours=_field(hour, 0, 23),
        days=_field(day, 1, 31),
        months=_field(month, 1, 12, _MONTHS, 1),
        weekdays=weekdays,
        any_day=day == "*",
        any_weekday=weekday == "*",
    )
    cron.next_after(datetime(2000, 1, 1, tzinfo=UTC))  # refuse expressions that never fire
    return cron


def parse_schedule(text: str) -> Schedule | None:
    """`every 6h` / `every 30 minutes` / `0 */6 * * *` -> a Schedule; empty -> None."""
    text = text.strip()
    if not text:
        return None
    m = _EVERY.match(text)
    if m is not None:
        seconds = int(m[1]) * _UNIT_SECONDS[m[2][0].lower()]
        if seconds < MIN_INTERVAL_S:
            raise ScheduleError(f"{text!r} is more often than once every {MIN_INTERVAL_S} s")
        return Every(text, seconds)
    if text.lower().startswith("every"):
        raise ScheduleError(f"{text!r}: write `every N` with a unit s, m, h or d, e.g. `every 6h`")
    return parse_cron(text)


def _utcnow() -> datetime:
    return datetime.now(UTC)


async def run_schedule(
    schedule: Schedule,
    job: Callable[[], Awaitable[object]],
    *,
    now: Callable[[], datetime] = _utcnow,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    runs: int | None = None,
) -> None:
    """Run `job` at every time of `schedule`, until cancelled (or after `runs` runs).

    The next time is computed when a run ends, so a run that overlaps its next time is
    not followed by a burst of catch-up runs, and two runs never overlap. The first run is
    at the first scheduled time after start: restarting the server does not crawl at once.
    A failing job is logged and the schedule goes on.
    """
    done = 0
    while runs is None or done < runs:
        at = schedule.next_after(now())
        delay = (at - now()).total_seconds()
        log.info("schedule %r: next run at %s", schedule.text, at.isoformat())
        if delay > 0:
            await sleep(delay)
        try:
            await job()
        except Exception:
            log.exception("schedule %r: the job failed", schedule.text)
        done += 1
