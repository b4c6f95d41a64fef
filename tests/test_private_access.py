"""No code in registry/ or workers/ touches a private attribute of an object that is not the
project's own: a library's underscored names change without notice, and code relying on
them breaks (or, worse, silently takes another path) on its next release.

What counts as such an access, found in the source (AST) and checked against the objects
the modules really hold once imported:

* `x._name` (one leading underscore, not a dunder) where `x` is a module that is not the
  project's, or `_name` is defined by some class or module outside the project that the
  project has loaded, unless `x` is the project's own by its annotation; `getattr`,
  `setattr`, `hasattr` and `delattr` with such a name written out count the same;
* `self._name` (or `cls.`, `super().`) in a class with a base from outside the project
  that defines `_name` (in its class, its `__slots__`, or as `self._name = ...` in its
  source), and a class body defining such a name (overriding a library's private hook);
* importing an underscored name from, or importing, a module outside the project whose
  path has an underscored part, or one of the library internals in `INTERNAL_MODULES`.

Names that libraries document as public despite the underscore are allowed
(`PUBLIC_UNDERSCORED`); an exception for one place is listed in `ALLOWED` with its reason.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
import textwrap
import types
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ("registry", "workers")
# Public API spelled with an underscore so as not to clash with field names: namedtuple's
# (`_asdict`, `_replace`, `_fields`, `_make`, `_field_defaults`) and SQLAlchemy's Row's
# (`_mapping`, `_t`, `_tuple`, also `_asdict` and `_fields`), both documented as public.
PUBLIC_UNDERSCORED = frozenset({"_asdict", "_replace", "_fields", "_make", "_field_defaults", "_mapping", "_t", "_tuple"})
# Library modules that are implementation, not API: their names may change in any release.
INTERNAL_MODULES = {
    "sqlalchemy.util": "SQLAlchemy's internal utilities (greenlet_spawn, await_, ...)",
    "sqlalchemy.connectors": "SQLAlchemy's driver adapter internals",
    "sqlalchemy.pool.base": "SQLAlchemy's pool implementation (_ConnectionFairy, ...)",
    "sqlalchemy.engine.default": "SQLAlchemy's default dialect implementation",
    "sqlalchemy.sql.compiler": "SQLAlchemy's compiler implementation (its API is the compiled object's)",
    "sqlalchemy.dialects.sqlite.aiosqlite": "SQLAlchemy's aiosqlite adapter",
    "sqlalchemy.dialects.sqlite.pysqlite": "SQLAlchemy's pysqlite adapter",
    "sqlalchemy.dialects.postgresql.asyncpg": "SQLAlchemy's asyncpg adapter",
    "sqlalchemy.dialects.postgresql.psycopg": "SQLAlchemy's psycopg adapter",
    "aiosqlite.core": "aiosqlite's implementation",
}
# The libraries the project runs on, with the modules of theirs it reaches at run time (the
# drivers SQLAlchemy loads for an engine): their private names are known to the checker
# whether or not an import of the project's has loaded them yet.
LIBRARIES = (
    "sqlalchemy", "sqlalchemy.ext.asyncio", "sqlalchemy.orm", "sqlalchemy.pool", "sqlalchemy.engine.default",
    "sqlalchemy.sql.compiler", "sqlalchemy.dialects.sqlite.aiosqlite", "sqlalchemy.dialects.postgresql.asyncpg",
    "aiosqlite", "asyncpg", "aiohttp", "alembic", "procrastinate", "psycopg", "huggingface_hub", "jinja2", "numpy",
    "msgspec", "aiofiles", "sqlite3", "argparse", "asyncio",
)  # fmt: skip
# (file, name): why this one place may. Every other access found is a defect to fix.
ALLOWED: dict[tuple[str, str], str] = {
    ("workers/verify_checks.py", "_data"): (
        "the mapped bytes of registry.runner.weights.ModelFile, the project's own class (the name is one "
        "libraries use too, and the receiver's type is not written where it is read)"
    ),
}


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in PUBLIC_UNDERSCORED


def _ours(module: str | None) -> bool:
    return module is not None and module.split(".")[0] in PROJECT


def _internal_module(module: str) -> str | None:
    """Why importing `module` (not the project's) reaches into a library's internals."""
    parts = module.split(".")
    if any(_private(p) for p in parts):
        return f"a private module ({module})"
    for name, why in INTERNAL_MODULES.items():
        if module == name or module.startswith(name + "."):
            return why
    return None


def _self_assigned(cls: type) -> set[str]:
    """Names a class assigns as `self._name = ...` in its own source."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return set()
    names = set()
    for node in ast.walk(ast.parse(source)):
        stored = isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
        if stored and isinstance(node.value, ast.Name) and node.value.id == "self" and _private(node.attr):
            names.add(node.attr)
    return names


@cache
def _defined_by(cls: type) -> frozenset[str]:
    """The private names a class itself defines: in its namespace, slots, or on `self`."""
    names = {n for n in vars(cls) if _private(n)}
    slots = vars(cls).get("__slots__", ())
    names |= {s for s in ([slots] if isinstance(slots, str) else slots) if _private(s)}
    return frozenset(names | _self_assigned(cls))


def _foreign_bases(cls: type) -> list[type]:
    return [base for base in cls.__mro__[1:] if base is not object and not _ours(base.__module__)]


@cache
def foreign_private_names() -> frozenset[str]:
    """Every private name a module outside the project, loaded now, or one of its classes
    defines: what `x._name` may reach in a library."""
    for library in LIBRARIES:
        importlib.import_module(library)
    names: set[str] = set()
    for module_name, module in list(sys.modules.items()):
        if _ours(module_name) or not isinstance(module, types.ModuleType):
            continue
        for attr, value in list(vars(module).items()):
            if _private(attr):
                names.add(attr)
            if isinstance(value, type) and value.__module__ == module_name:
                names |= {n for base in value.__mro__ for n in vars(base) if _private(n)}
                slots = [getattr(base, "__slots__", ()) for base in value.__mro__]
                names |= {s for group in slots for s in ([group] if isinstance(group, str) else group) if _private(s)}
    return frozenset(names)


class Checker(ast.NodeVisitor):
    """The findings of one module's source, given its namespace once imported."""

    def __init__(self, path: str, namespace: dict[str, Any], module: str) -> None:
        self.path, self.namespace, self.module = path, namespace, module
        self.findings: list[tuple[Finding, str]] = []
        self.classes: list[type | None] = []
        self.annotations: list[dict[str, str]] = [{}]  # per function scope: name -> annotation text

    def report(self, node: ast.AST, name: str, what: str) -> None:
        if (self.path, name) not in ALLOWED:
            self.findings.append((Finding(self.path, getattr(node, "lineno", 0), what), name))

    # -- where we are -------------------------------------------------------------------

    def _class_object(self, node: ast.ClassDef) -> type | None:
        outer = self.classes[-1] if self.classes else None
        holder: Any = outer if outer is not None else self.namespace
        found = getattr(holder, node.name, None) if outer is not None else holder.get(node.name)
        if isinstance(found, type):
            return found
        try:  # a class made inside a function: its bases, evaluated where the module can
            bases = [eval(ast.unparse(b), dict(self.namespace)) for b in node.bases]
            return type(node.name, tuple(b for b in bases if isinstance(b, type)) or (object,), {})
        except Exception:
            return None

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        cls = self._class_object(node)
        if cls is not None:
            foreign = _foreign_bases(cls)
            for item in node.body:  # a class body defining a library base's private name
                names = []
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    names = [item.name]
                elif isinstance(item, ast.Assign):
                    names = [t.id for t in item.targets if isinstance(t, ast.Name)]
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names = [item.target.id]
                for name in names:
                    if _private(name) and (owner := next((b for b in foreign if name in _defined_by(b)), None)):
                        self.report(item, name, f"{node.name}.{name} overrides {owner.__module__}.{owner.__qualname__}'s private {name}")
        self.classes.append(cls)
        self.generic_visit(node)
        self.classes.pop()

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        scope = dict(self.annotations[-1])
        for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]:
            if arg.annotation is not None:
                scope[arg.arg] = ast.unparse(arg.annotation)
        self.annotations.append(scope)
        self.generic_visit(node)
        self.annotations.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if isinstance(node.target, ast.Name):
            self.annotations[-1][node.target.id] = ast.unparse(node.annotation)
        self.generic_visit(node)

    # -- what we read ---------------------------------------------------------------------

    def _is_self(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name) and node.id in ("self", "cls"):
            return True
        return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"

    def _own_by_annotation(self, node: ast.expr) -> bool:
        """`x` annotated with one of the project's classes (`other: GGUFArray`)."""
        if not isinstance(node, ast.Name):
            return False
        annotation = self.annotations[-1].get(node.id)
        if annotation is None:
            return False
        target = self.namespace.get(annotation.strip("'\""))
        return isinstance(target, type) and _ours(target.__module__)

    def check(self, node: ast.AST, receiver: ast.expr, name: str) -> None:
        if not _private(name):
            return
        if self._is_self(receiver):
            cls = self.classes[-1] if self.classes else None
            if cls is None:
                return
            owner = next((b for b in _foreign_bases(cls) if name in _defined_by(b)), None)
            if owner is not None:
                self.report(node, name, f"{ast.unparse(receiver)}.{name}: private to {owner.__module__}.{owner.__qualname__}")
            return
        if isinstance(receiver, ast.Name) and isinstance(module := self.namespace.get(receiver.id), types.ModuleType):
            if not _ours(module.__name__):
                self.report(node, name, f"{receiver.id}.{name}: private to the module {module.__name__}")
            return
        if name in foreign_private_names() and not self._own_by_annotation(receiver):
            self.report(node, name, f"{ast.unparse(receiver)}.{name}: a library's private name")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.check(node, node.value, node.attr)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) >= 2:
            name = node.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                self.check(node, node.args[0], name.value)
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if not _ours(alias.name) and (why := _internal_module(alias.name)):
                self.report(node, alias.name, f"import {alias.name}: {why}")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level or _ours(module):
            return
        if why := _internal_module(module):
            self.report(node, module, f"from {module} import ...: {why}")
        for alias in node.names:
            if _private(alias.name):
                self.report(node, alias.name, f"from {module} import {alias.name}: private to {module}")


def findings_of(path: Path) -> list[tuple[Finding, str]]:
    relative = path.relative_to(ROOT)
    module_name = ".".join(relative.with_suffix("").parts).removesuffix(".__init__")
    # A `__main__` runs when imported: its package's namespace stands in for its own.
    module = importlib.import_module(module_name.removesuffix(".__main__"))
    checker = Checker(str(relative), vars(module), module_name)
    checker.visit(ast.parse(path.read_text(), str(relative)))
    return checker.findings


def project_files() -> Iterator[Path]:
    for top in PROJECT:
        yield from sorted((ROOT / top).rglob("*.py"))


def test_no_private_attribute_of_a_library_is_touched() -> None:
    files = list(project_files())
    for path in files:  # every module loaded first: the libraries' names are those they load
        findings_of(path)
    found = [str(f) for path in files for f, _ in findings_of(path)]
    assert not found, "private attributes of objects that are not the project's:\n" + "\n".join(found)


# The checker itself: it finds each way the catalog once reached into its libraries.
FORMER_ACCESSES = [
    "def f(compiled): return compiled._bind_processors",
    "def f(statement, d): return statement._compiler(d)",
    "def f(statement): return statement._generate_cache_key()",
    "async def f(adapt, sql): return await adapt._prepare(sql, None)",
    "def f(raw, e): raw._pool._invalidate(raw, e)",
    "def f(aio): return aio._conn",
    "async def f(aio, fn): return await aio._execute(fn)",
    "def f(c): return c.type._cached_result_processor(None, None)",
    "def f(dialect): dialect._invalidate_schema_cache()",
    "def f(compiler): return hasattr(compiler, '_bind_processors')",
    "from sqlalchemy.pool.base import _ConnectionFairy",
    "from sqlalchemy.util.concurrency import greenlet_spawn",
    "import sqlalchemy.util",
    "import argparse\nx: argparse._SubParsersAction",
    "def f(stream): return getattr(stream, '_read_nowait', None)",
    textwrap.dedent("""
        from aiohttp import web
        class Server(web.Server):
            def f(self):
                return self._kwargs
    """),
    textwrap.dedent("""
        from sqlalchemy.dialects.postgresql import asyncpg
        class Cursor(asyncpg.AsyncAdapt_asyncpg_cursor):
            def f(self):
                return self._adapt_connection
    """),
    textwrap.dedent("""
        from sqlalchemy.dialects.postgresql import asyncpg
        class Connection(asyncpg.AsyncAdapt_asyncpg_connection):
            _execute_mutex = None
    """),
]


@pytest.mark.parametrize("source", FORMER_ACCESSES)
def test_the_checker_finds_each_former_access(source: str) -> None:
    namespace: dict[str, Any] = {"__name__": "registry.example"}
    tree = ast.parse(source)
    exec(compile(tree, "<example>", "exec"), namespace)  # the examples above, nothing else
    checker = Checker("example.py", namespace, "registry.example")
    checker.visit(tree)
    assert checker.findings, source


@pytest.mark.parametrize(
    "source",
    [
        "class A:\n    def __init__(self): self._x = 1\n    def f(self): return self._x",
        "class A:\n    _x = 1\n    def __eq__(self, other: 'A'): return other._x == self._x",
        "from collections import namedtuple\nP = namedtuple('P', 'a')\ndef f(p): return p._replace(a=1)._asdict()",
        "def f(row): return row._mapping['id']",
    ],
)
def test_the_project_may_read_its_own_and_documented_names(source: str) -> None:
    namespace: dict[str, Any] = {"__name__": "registry.example"}
    tree = ast.parse(source)
    exec(compile(tree, "<example>", "exec"), namespace)
    checker = Checker("example.py", namespace, "registry.example")
    checker.visit(tree)
    assert not checker.findings, [str(f) for f, _ in checker.findings]
