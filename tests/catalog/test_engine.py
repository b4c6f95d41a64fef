"""Engine options per dialect (registry.catalog.db.create_engine)."""

from __future__ import annotations

from sqlalchemy.pool import QueuePool

from registry.catalog.db import POSTGRES_POOL_OVERFLOW, POSTGRES_POOL_SIZE, create_engine


def test_postgresql_engines_keep_a_pool_a_busy_server_uses() -> None:
    """A new PostgreSQL connection is a new server process: past the default pool of 5,
    a busy `serve` opened and closed overflow connections all the time."""
    engine = create_engine("postgresql+asyncpg://nobody@127.0.0.1:1/none")  # connects lazily
    assert isinstance(engine.pool, QueuePool)
    assert (engine.pool.size(), engine.pool._max_overflow) == (POSTGRES_POOL_SIZE, POSTGRES_POOL_OVERFLOW)
    chosen = create_engine("postgresql+asyncpg://nobody@127.0.0.1:1/none", pool_size=3)
    assert isinstance(chosen.pool, QueuePool) and chosen.pool.size() == 3
