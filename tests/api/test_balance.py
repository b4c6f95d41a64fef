"""Connection counts shared by the processes of `registry serve --workers N` (registry.api.balance)."""

from __future__ import annotations

from pathlib import Path

import pytest

from registry.api.balance import SLACK, ConnectionShares


def test_a_process_over_its_share_plus_slack_is_told_so_and_the_primary_removes_the_file() -> None:
    primary = ConnectionShares.create(2)
    replica = ConnectionShares.attach(primary.path, 1)
    try:
        assert (replica.workers, replica.slot) == (2, 1)
        held = [0, 0]
        primary.watch(lambda: held[0])
        replica.watch(lambda: held[1])
        # (primary's, replica's connections) -> whether each is over its share (half the
        # total, rounded up) plus SLACK
        cases = {(22, 10): (True, False), (16 + SLACK, 16 - SLACK): (False, False),
                 (17 + SLACK, 15 - SLACK): (True, False), (10, 30): (False, True), (0, 0): (False, False)}  # fmt: skip
        for counts, expected in cases.items():
            held[:] = counts
            primary.over_share(), replica.over_share()  # each publishes its own count when asked
            assert (primary.over_share(), replica.over_share()) == expected, counts
    finally:
        replica.close()
        primary.close()
    assert not primary.path.exists()


def test_a_lone_process_never_closes_and_bad_slots_are_refused(tmp_path: Path) -> None:
    alone = ConnectionShares.create(1)
    try:
        alone.watch(lambda: 1000)
        assert alone.over_share() is False
        with pytest.raises(ValueError, match="slot 1 is not one of 1 workers"):
            ConnectionShares.attach(alone.path, 1)
    finally:
        alone.close()
    short = tmp_path / "short"
    short.write_bytes(b"\0" * 8)
    with pytest.raises(ValueError, match="fewer than 2 slots"):
        ConnectionShares(short, 0, 2)
