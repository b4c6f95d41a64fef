"""Helpers for tests that talk to the fake hub."""

from __future__ import annotations

from registry.hub.http import RetryPolicy

TOKEN = "hf_test_token"

# Waits are recorded by `Sleeps`, never slept, so retry tests are fast and exact.
FAST_RETRY = RetryPolicy(max_attempts=4, base_delay=0.01, max_delay=0.05, max_total_wait=600.0)


class Sleeps(list[float]):
    """A stand-in for asyncio.sleep that records each requested delay and returns at once."""

    async def __call__(self, delay: float) -> None:
        self.append(delay)
