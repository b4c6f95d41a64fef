"""`migrate.ensure_schema` in a process of its own, started by the parent test with others.

Each child opens its engine and a first connection, waits at the shared barrier so that all
of them call `ensure_schema` at the same moment, and puts ("ok", migrated) or
("error", "Type: message") on the queue.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import text

from registry.catalog import migrate
from registry.catalog.db import create_engine

BARRIER_GUARD_S = 120  # only against a sibling that died before the barrier: never reached otherwise


def ensure_schema_together(url: str, barrier: Any, results: Any) -> None:
    async def run() -> bool:
        engine = create_engine(url)
        try:
            try:
                async with engine.connect() as conn:
                    await conn.execute(text("SELECT 1"))
            except BaseException:
                barrier.abort()  # the others stop waiting at once instead of for the guard
                raise
            await asyncio.to_thread(barrier.wait, BARRIER_GUARD_S)
            return await migrate.ensure_schema(engine)
        finally:
            await engine.dispose()

    try:
        results.put(("ok", asyncio.run(run())))
    except Exception as exc:
        results.put(("error", f"{type(exc).__name__}: {exc}".splitlines()[0]))
