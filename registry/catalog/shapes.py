"""Statement shapes: a SELECT compiled once with SQLAlchemy's public compiler, then run on
the driver with its values bound by position and its rows read like SQLAlchemy's.

A shape is named by a key. A statement built once (a module constant, a `functools.cache`
builder's) is its own key; a statement built per request comes as a `Keyed` statement, whose
key names its shape without its values (the search's plan, say), and is built only when the
shape is new. Values are named bind parameters given at execution.

The public parts of SQLAlchemy used: `ClauseElement.compile(dialect=...)`, the compiled
statement's `string`, `positiontup`, `binds`, `construct_params()` and
`construct_expanded_state()` (for IN lists expanded per execution), a Select's
`selected_columns`, and `TypeEngine.dialect_impl(dialect).result_processor(...)`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from sqlalchemy import BindParameter, SelectBase, exc
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import Executable

# Compiled shapes kept per database (least recently used dropped first): the catalog's
# reads have a few hundred shapes, the search's plans among them.
SHAPES_PER_DATABASE = 1024


@dataclass(frozen=True, slots=True)
class Keyed:
    """A statement named by the shape it has: `build()` makes it (every value that varies a
    named bind parameter), called only when no statement of this `key` is compiled yet."""

    key: Hashable
    build: Callable[[], Executable]


Statement = Executable | Keyed


class Shape:
    """One compiled SELECT: its SQL, how to bind values, how to read rows."""

    __slots__ = ("_binds", "_coltypes", "_compiled", "_expands", "_processed", "_row_type", "_types", "dialect",
                 "driver_types", "sql", "statement")  # fmt: skip

    def __init__(self, statement: SelectBase, dialect: Dialect) -> None:
        self.statement = statement
        self.dialect = dialect
        self._compiled = statement.compile(dialect=dialect)
        self.sql: str = self._compiled.string
        # IN lists of a parameter (and values rendered in the SQL) are expanded per execution.
        self._expands = any(b.expanding or b.literal_execute for b in self._compiled.binds.values())
        self._binds: list[tuple[str, Callable[[Any], Any] | None]] | None = None  # at the first values
        columns = list(statement.selected_columns)
        self._types = [c.type for c in columns]
        self._row_type = row_type(tuple(statement.selected_columns.keys()))
        self._coltypes: tuple[Any, ...] | bool | None = False  # False: no rows read yet
        self._processed: list[tuple[int, Callable[[Any], Any]]] = []
        # The driver's type of each column, where the read path asks it once (PostgreSQL).
        self.driver_types: tuple[Any, ...] | None = None

    def bind(self, values: Mapping[str, Any] | None) -> tuple[str, tuple[Any, ...]]:
        """The SQL and the positional arguments for these values, as SQLAlchemy binds them:
        the statement's own values, then each processed for the driver (dates, JSON, ...)."""
        compiled = self._compiled
        if self._binds is None:
            binds = compiled.binds
            self._binds = [(name, _bind_processor(binds[name], self.dialect)) for name in compiled.positiontup or ()]
        if self._expands:
            state = compiled.construct_expanded_state(values, escape_names=False)
            processors = {**{k: p for k, p in self._binds if p is not None}, **state.processors}
            params = state.parameters
            return state.statement, tuple(
                processors[k](params[k]) if k in processors else params[k] for k in state.positiontup or ()
            )
        params = compiled.construct_params(values, escape_names=False)
        return self.sql, tuple(params[k] if p is None else p(params[k]) for k, p in self._binds)

    def rows(self, raw: Sequence[Sequence[Any]], coltypes: tuple[Any, ...] | None = None) -> list[Any]:
        """Rows from the driver's. `coltypes`: the driver's type of each column, if it names
        them (PostgreSQL's type oids; SQLite's driver names none), which chooses some
        processors (PostgreSQL's numeric and float columns), as SQLAlchemy chooses them."""
        if coltypes != self._coltypes:
            described = coltypes if coltypes is not None and len(coltypes) == len(self._types) else None
            kinds = described or (None,) * len(self._types)
            processors = [
                t.dialect_impl(self.dialect).result_processor(self.dialect, k)
                for t, k in zip(self._types, kinds, strict=True)
            ]
            self._processed = [(i, p) for i, p in enumerate(processors) if p is not None]
            self._coltypes = coltypes
        make, processed = self._row_type, self._processed
        if not processed:
            return [make(r) for r in raw]
        out = []
        for r in raw:
            values = list(r)
            for i, process in processed:
                values[i] = process(values[i])
            out.append(make(values))
        return out


def _bind_processor(bind: BindParameter[Any], dialect: Dialect) -> Callable[[Any], Any] | None:
    """How a value of this parameter is handed to the driver (the dialect's form of its type)."""
    return bind.type.dialect_impl(dialect).bind_processor(dialect)


def row_type(keys: tuple[str, ...]) -> type:
    """A tuple class whose items also read by name, as SQLAlchemy's Row: as attributes
    (class properties, so a column named `count` is not tuple.count) and through `_mapping`
    (the first column of a repeated name). Columns without a label are read by position."""
    index: dict[str, int] = {}
    for i, key in enumerate(keys):
        index.setdefault(key, i)
    attrs: dict[str, Any] = {k: property(itemgetter(i)) for k, i in index.items() if k.isidentifier()}

    def mapping(self: tuple[Any, ...]) -> dict[str, Any]:
        return {k: self[i] for k, i in index.items()}

    attrs.update(__slots__=(), _fields=keys, _mapping=property(mapping))
    return type("Row", (tuple,), attrs)


class Shapes:
    """The compiled shapes of one database, by key, the least recently used dropped first."""

    def __init__(self, dialect: Dialect, limit: int = SHAPES_PER_DATABASE) -> None:
        self.dialect = dialect
        self.limit = limit
        self._entries: OrderedDict[Hashable, Shape | None] = OrderedDict()
        self._statements: OrderedDict[Hashable, Executable] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def statement(self, statement: Statement) -> Executable:
        """The statement itself: a `Keyed` one built once per key (for SQLAlchemy to run)."""
        if not isinstance(statement, Keyed):
            return statement
        entries = self._statements
        found = entries.get(statement.key)
        if found is None:
            found = entries[statement.key] = statement.build()
            if len(entries) > self.limit:
                entries.popitem(last=False)
        else:
            entries.move_to_end(statement.key)
        return found

    def get(self, statement: Statement) -> Shape | None:
        """The compiled shape of a statement, None for one this path does not run: anything
        but a SELECT (or a UNION of SELECTs) with result columns."""
        key: Hashable = statement.key if isinstance(statement, Keyed) else statement
        entries = self._entries
        try:
            shape = entries[key]
        except KeyError:
            built = statement.build() if isinstance(statement, Keyed) else statement
            shape = entries[key] = self._compile(built)
            if len(entries) > self.limit:
                entries.popitem(last=False)
        else:
            entries.move_to_end(key)
        return shape

    def _compile(self, statement: Executable) -> Shape | None:
        if not isinstance(statement, SelectBase) or not statement.selected_columns:
            return None
        shape = Shape(statement, self.dialect)
        if not shape.sql.lstrip().upper().startswith(("SELECT", "WITH", "(")):
            return None
        return shape


class Rows:
    """The rows of one SELECT, with the part of SQLAlchemy's Result the catalog uses."""

    __slots__ = ("_rows",)

    def __init__(self, rows: list[Any]) -> None:
        self._rows = rows

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows)

    def all(self) -> list[Any]:
        return list(self._rows)

    def first(self) -> Any:
        return self._rows[0] if self._rows else None

    def one_or_none(self) -> Any:
        if len(self._rows) > 1:
            raise exc.MultipleResultsFound("Multiple rows were found when one or none was required")
        return self.first()

    def one(self) -> Any:
        if not self._rows:
            raise exc.NoResultFound("No row was found when one was required")
        return self.one_or_none()

    def scalar(self) -> Any:
        return self._rows[0][0] if self._rows else None

    def scalar_one(self) -> Any:
        return self.one()[0]

    def scalar_one_or_none(self) -> Any:
        row = self.one_or_none()
        return None if row is None else row[0]

    def scalars(self) -> Scalars:
        return Scalars([r[0] for r in self._rows])


class Scalars(Rows):
    """The first column of each row, as SQLAlchemy's ScalarResult gives them."""

    __slots__ = ()

    def scalar(self) -> Any:
        return self.first()

    def scalar_one(self) -> Any:
        return self.one()

    def scalar_one_or_none(self) -> Any:
        return self.one_or_none()

    def scalars(self) -> Scalars:
        return self


__all__ = ["SHAPES_PER_DATABASE", "Keyed", "Rows", "Scalars", "Shape", "Shapes", "Statement", "row_type"]
