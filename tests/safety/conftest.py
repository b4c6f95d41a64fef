"""One sandbox pool for the whole safety suite, as an indexing run would hold one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from registry.safety import SandboxLimits, SandboxPool


@pytest.fixture(scope="session")
def pool() -> Iterator[SandboxPool]:
    # A shorter wall limit than production's 2 s keeps the suite quick; real templates
    # render in well under a millisecond.
    with SandboxPool(size=1, limits=SandboxLimits(timeout=1.0)) as p:
        p.warm()
        yield p
