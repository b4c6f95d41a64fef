"""Schedule parsing (`every 6h`, 5-field cron) and the scheduler loop."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from workers.schedule import Cron, Every, ScheduleError, parse_schedule, run_schedule


def _t(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("every 6h", 6 * 3600), ("every 30m", 1800), ("every 2 days", 172800), ("EVERY 90 minutes", 5400),
     ("every 1d", 86400), ("every 60s", 60)],
)  # fmt: skip
def test_every(text: str, seconds: int) -> None:
    schedule = parse_schedule(text)
    assert isinstance(schedule, Every) and schedule.seconds == seconds
    assert schedule.next_after(_t("2026-01-01T00:00")) == _t("2026-01-01T00:00") + timedelta(seconds=seconds)


def test_empty_means_no_schedule() -> None:
    assert parse_schedule("") is None and parse_schedule("   ") is None


@pytest.mark.parametrize(
    ("text", "after", "expected"),
    [
        ("0 */6 * * *", "2026-03-10T05:59", "2026-03-10T06:00"),
        ("0 */6 * * *", "2026-03-10T06:00", "2026-03-10T12:00"),
        ("0 */6 * * *", "2026-03-10T18:30", "2026-03-11T00:00"),
        ("*/15 * * * *", "2026-03-10T10:07:31", "2026-03-10T10:15"),
        ("30 2 * * 1", "2026-03-10T12:00", "2026-03-16T02:30"),  # Monday
        ("30 2 * * mon", "2026-03-10T12:00", "2026-03-16T02:30"),
        ("0 0 * * 7", "2026-03-10T12:00", "2026-03-15T00:00"),  # 7 is Sunday too
        ("0 0 1 * *", "2026-03-10T00:00", "2026-04-01T00:00"),
        ("0 0 31 * *", "2026-04-01T00:00", "2026-05-31T00:00"),  # April has no 31st
        ("0 0 29 feb *", "2026-01-01T00:00", "2028-02-29T00:00"),
        ("5,10-12 8 * * *", "2026-03-10T08:10", "2026-03-10T08:11"),
        ("0 12 1-7/3 * *", "2026-03-02T00:00", "2026-03-04T12:00"),
        # Both day fields restricted: either one matching is enough (classic cron).
        ("0 0 13 * fri", "2026-03-01T00:00", "2026-03-06T00:00"),
        ("0 0 1 1 *", "2026-12-31T23:59", "2027-01-01T00:00"),
    ],
)
def test_cron_next_after(text: str, after: str, expected: str) -> None:
    schedule = parse_schedule(text)
    assert isinstance(schedule, Cron)
    assert schedule.next_after(_t(after)) == _t(expected)


@pytest.mark.parametrize(
    "text",
    ["every", "every 6", "every 6 weeks", "every 10s", "0 */6 * *", "0 */6 * * * *", "60 * * * *",
     "* 24 * * *", "0 0 0 * *", "0 0 * 13 *", "*/0 * * * *", "a * * * *", "0 0 30 2 *", "5-1 * * * *"],
)  # fmt: skip
def test_bad_schedules_are_refused(text: str) -> None:
    with pytest.raises(ScheduleError):
        parse_schedule(text)


async def test_run_schedule_runs_at_each_time_and_survives_a_failing_job() -> None:
    clock = [_t("2026-03-10T05:00")]
    slept: list[float] = []
    runs: list[datetime] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += timedelta(seconds=seconds)

    async def job() -> None:
        runs.append(clock[0])
        clock[0] += timedelta(minutes=10)  # the crawl takes a while
        if len(runs) == 1:
            raise RuntimeError("the hub is down")

    schedule = parse_schedule("0 */6 * * *")
    assert schedule is not None
    await run_schedule(schedule, job, now=lambda: clock[0], sleep=sleep, runs=3)
    assert runs == [_t("2026-03-10T06:00"), _t("2026-03-10T12:00"), _t("2026-03-10T18:00")]
    assert slept[0] == 3600


async def test_an_interval_still_fires_when_the_server_restarts_more_often() -> None:
    # `every 6h` under a server restarted every 4 hours (deploys, a crash loop): each
    # process lives less than the interval, and the crawls must still happen.
    schedule = parse_schedule("every 6h")
    assert schedule is not None
    clock = [_t("2026-03-10T01:30")]
    runs: list[datetime] = []

    class Restart(Exception):
        pass

    async def job() -> None:
        runs.append(clock[0])

    for _ in range(6):  # 24 hours of 4-hour process lifetimes
        stop = clock[0] + timedelta(hours=4)

        async def sleep(seconds: float, stop: datetime = stop) -> None:
            if clock[0] + timedelta(seconds=seconds) >= stop:
                clock[0] = stop
                raise Restart
            clock[0] += timedelta(seconds=seconds)

        with pytest.raises(Restart):
            await run_schedule(schedule, job, now=lambda: clock[0], sleep=sleep)
    assert runs == [_t(f"2026-03-10T{h:02}:00") for h in (6, 12, 18)] + [_t("2026-03-11T00:00")]


def test_interval_times_do_not_depend_on_when_the_process_started() -> None:
    schedule = parse_schedule("every 15m")
    assert schedule is not None
    for start in ("2026-03-10T10:00:01", "2026-03-10T10:07", "2026-03-10T10:14:59"):
        assert schedule.next_after(_t(start)) == _t("2026-03-10T10:15")
    assert schedule.next_after(_t("2026-03-10T10:15")) == _t("2026-03-10T10:30")  # strictly after
