"""Column types and the constraint naming convention shared by every catalog table.

The same models run on SQLite (embedded default) and PostgreSQL (production), so each
type here picks the right implementation per dialect.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, DateTime, Dialect, Integer, MetaData
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.types import TypeDecorator

# Alembic needs stable, deterministic names to drop or alter a constraint later.
NAMING_CONVENTION: dict[str, str] = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)

# SQLite only auto-increments an `INTEGER PRIMARY KEY`; PostgreSQL gets 64-bit keys.
BigId = BigInteger().with_variant(Integer(), "sqlite")

# JSONB on PostgreSQL (indexable, compact); plain JSON text on SQLite.
Json = JSON().with_variant(JSONB(), "postgresql")


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on both databases.

    SQLite has no timezone type: values are stored naive in UTC and made aware again on
    the way out, so comparisons and cursors behave the same on both dialects.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, str):  # pragma: no cover - raw text from a hand-written row
            value = datetime.fromisoformat(value)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def utcnow() -> datetime:
    return datetime.now(UTC)


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
