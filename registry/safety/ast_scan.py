"""Static analysis of a chat template from its parsed Jinja AST (nothing is rendered here).

Chat templates only need a handful of things: loop over `messages`, read `role` and
`content`, compare strings, concatenate. Server-side template injection needs to reach a
Python object's internals (`__class__`, `__globals__`, `__subclasses__` ...) or one of the
few Jinja globals that are real Python functions (`lipsum`, `cycler`, `joiner`), or
template internals (`self`, `namespace` objects). So the scan flags:

- attribute names starting with `_` in any position: `x.__y__`, `x['__y__']`,
  `x|attr('__y__')`, `map(attribute=...)`, keyword arguments `dict(__y__=...)`;
- names built from pieces: every expression that folds to a constant string (`~`, `+`,
  `*`, `%`, `|join`, `|format`, `|replace`, `|reverse`, slicing, `{% set %}` variables)
  is checked, so `'__glo' ~ 'bals__'` is seen as `__globals__`; escapes such as `\\x5f` are
  already decoded by the Jinja lexer and are also reported from the raw source;
- attribute or subscript names computed at render time from string operations;
- references to `lipsum`, `cycler`, `joiner`, `self`, Flask's `config`/`request`, and uses
  of `namespace` other than calling it;
- `{% include %}`, `{% import %}`, `{% extends %}` (no loader exists for chat templates).

A template that does not parse is a finding with the parser's error, and is then searched
by keyword after removing quotes and concatenation operators. Folding runs in the indexing
process, so its values and its number of steps are capped; a template that needs more is a
`template-too-complex` finding, and its constants and computed names are still checked.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import islice, product
from typing import Any

from jinja2 import nodes
from jinja2.exceptions import TemplateSyntaxError

from registry.safety.findings import Finding, Severity, clip
from registry.safety.sandbox import template_environment

__all__ = ["AstReport", "keyword_scan", "scan_source"]

_DUNDER = re.compile(r"__[A-Za-z]\w*")
# Attributes without underscores that only matter on the way to code execution.
_DANGEROUS_ATTRS = frozenset(
    {
        "mro", "func_globals", "func_code", "gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame",
        "f_globals", "f_locals", "f_builtins", "f_back", "f_code", "tb_frame", "tb_next", "co_code",
        "im_func", "popen", "system", "spawnv", "execv", "execl", "check_output", "import_module",
        "load_module", "exec_module", "getoutput", "Popen",
    }
)
_SSTI_GLOBALS = {
    "lipsum": "Jinja's lipsum global is a Python function whose __globals__ reach os",
    "cycler": "Jinja's cycler global exposes a Python class (cycler.__init__.__globals__)",
    "joiner": "Jinja's joiner global exposes a Python class (joiner.__init__.__globals__)",
    "self": "`self` is the TemplateReference, a path to the render context internals",
    "config": "`config` is a Flask global probed by template-injection payloads",
    "request": "`request` is a Flask global probed by template-injection payloads",
    "url_for": "`url_for` is a Flask global probed by template-injection payloads",
    "get_flashed_messages": "a Flask global probed by template-injection payloads",
}
# Filters whose `attribute=` keyword or first argument names an attribute to read.
_ATTRIBUTE_FILTERS = frozenset({"map", "selectattr", "rejectattr", "groupby", "sort", "sum", "unique", "min", "max"})
_STRING_BUILDERS = frozenset({"join", "format", "replace", "reverse", "string", "lower", "upper", "trim"})
_ESCAPED_UNDERSCORE = re.compile(r"\\x5f|\\u005f|\\U0000005f|\\137|\\N\{LOW LINE\}", re.IGNORECASE)

_MAX_CANDIDATES = 8
_MAX_FOLD = 4096
_MAX_DEPTH = 64
# Folding runs in the indexing process, without the sandbox's time and memory limits, so
# every folded value stays small (one step can at most double it) and the number of
# folding steps per template is capped. Real chat templates need a few thousand steps.
_MAX_INT_BITS = 64
_MAX_NESTING = 8
_MAX_FOLD_STEPS = 100_000


@dataclass
class AstReport:
    findings: list[Finding] = field(default_factory=list)
    parsed: bool = True
    names: set[str] = field(default_factory=set)  # variables the template reads

    @property
    def uses_tools(self) -> bool:
        return "tools" in self.names


def _direct_and_refs(node: nodes.Node) -> tuple[bool, set[str]]:
    """Whether an expression itself builds strings, and the variables it reads."""
    direct, refs = False, set()
    for n in _walk(node):
        direct = direct or _builds_string(n)
        key = _var_key(n)
        if key is not None:
            refs.add(key)
    return direct, refs


_NUMERIC_FILTERS = frozenset({"length", "count", "int", "float", "abs", "round", "sum"})


def _numeric(n: nodes.BinExpr) -> bool:
    """`messages[loop.index0 + 1]` is index arithmetic, not a name being built."""
    has_str, has_num = False, False
    for x in _walk(n):
        if isinstance(x, nodes.Const):
            has_str |= isinstance(x.value, str)
            has_num |= isinstance(x.value, int | float) and not isinstance(x.value, bool)
        else:
            loop_attr = isinstance(x, nodes.Getattr) and isinstance(x.node, nodes.Name) and x.node.name == "loop"
            has_num |= loop_attr or (isinstance(x, nodes.Filter) and x.name in _NUMERIC_FILTERS)
    return has_num and not has_str


def _builds_string(n: nodes.Node) -> bool:
    if isinstance(n, nodes.Concat) or (isinstance(n, nodes.Filter) and n.name in _STRING_BUILDERS):
        return True
    return isinstance(n, nodes.Add | nodes.Mod | nodes.Mul) and not _numeric(n)


def _string_built(assigns: dict[str, list[nodes.Node]]) -> set[str]:
    """Variables and namespace attributes whose value is built from strings at render time.

    Propagated through assignments (`{% set b = a %}`, `{% set ns.s = ns.s ~ c %}`) by a
    walk over the reverse dependency graph: linear, however long the chain.
    """
    built: set[str] = set()
    dependents: dict[str, set[str]] = {}
    for key, values in assigns.items():
        for v in values:
            direct, refs = _direct_and_refs(v)
            if direct:
                built.add(key)
            for r in refs:
                dependents.setdefault(r, set()).add(key)
    todo = list(built)
    while todo:
        for d in dependents.get(todo.pop(), ()):
            if d not in built:
                built.add(d)
                todo.append(d)
    return built


def _var_key(n: nodes.Node) -> str | None:
    """`name` for a variable, `ns.attr` for a namespace attribute, else None."""
    if isinstance(n, nodes.Name):
        return n.name
    if isinstance(n, nodes.Getattr) and isinstance(n.node, nodes.Name):
        return f"{n.node.name}.{n.attr}"
    if isinstance(n, nodes.NSRef):
        return f"{n.name}.{n.attr}"
    return None


def _small(value: Any) -> bool:
    """A folded value worth keeping: strings and tuples of bounded total size, short ints."""
    stack, size = [(value, 0)], 0
    while stack:
        v, depth = stack.pop()
        if isinstance(v, tuple):
            if depth >= _MAX_NESTING:
                return False
            size += len(v)
            stack.extend((x, depth + 1) for x in v[: _MAX_FOLD + 1])
        elif isinstance(v, str):
            size += len(v)
        elif isinstance(v, int) and v.bit_length() > _MAX_INT_BITS:
            return False
        if size > _MAX_FOLD:
            return False
    return True


def _walk(root: nodes.Node) -> Iterator[nodes.Node]:
    # Iterative: a hostile template may nest deeper than Python's recursion limit.
    stack = [root]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(list(n.iter_child_nodes())))


class _Folder:
    """Constant folding of string-building expressions into candidate values."""

    def __init__(self, assigns: dict[str, list[nodes.Node]]) -> None:
        self.assigns = assigns
        self.active: set[str] = set()
        self.memo: dict[int, list[Any]] = {}
        self.truncated = False
        self.steps = 0
        self.exhausted = False  # the step budget ran out: later folds found nothing

    def prime(self, all_nodes: list[nodes.Node]) -> None:
        """Fold every node children-first, so later folds are lookups (linear, shallow)."""
        for n in reversed(all_nodes):
            self.fold(n)

    def fold(self, node: nodes.Node | None, depth: int = 0) -> list[Any]:
        if node is None:
            return []
        if depth > _MAX_DEPTH:
            self.truncated = True
            return []
        memo = self.memo.get(id(node))
        if memo is not None:
            return memo
        if not isinstance(node, nodes.Const | nodes.TemplateData):
            # Variables reassigned many times, or resolving each other, cost steps
            # quadratic in the template's size; constants stay free.
            self.steps += 1
            if self.steps > _MAX_FOLD_STEPS:
                self.exhausted = True
                return []
        outer, self.truncated = self.truncated, False
        try:
            out = self._fold(node, depth + 1)
        except (TypeError, ValueError, IndexError, KeyError, OverflowError, ZeroDivisionError):
            out = []
        out = [v for v in out if _small(v)][:_MAX_CANDIDATES]
        # A result cut short by the depth limit, or seen while resolving a variable (cycle
        # guard active), may be incomplete: only complete results are reused.
        if not self.truncated and not self.active:
            self.memo[id(node)] = out
        self.truncated = self.truncated or outer
        return out

    def _product(self, parts: list[nodes.Expr], depth: int) -> list[list[Any]]:
        folded = [self.fold(p, depth) for p in parts]
        if any(not f for f in folded):
            return []
        return [list(c) for c in islice(product(*folded), _MAX_CANDIDATES)]

    def _fold(self, node: nodes.Node, depth: int) -> list[Any]:
        if isinstance(node, nodes.Const | nodes.TemplateData):
            v = node.data if isinstance(node, nodes.TemplateData) else node.value
            return [v] if isinstance(v, str | int) and not isinstance(v, bool) else []
        if isinstance(node, nodes.List | nodes.Tuple):
            return [tuple(c) for c in self._product(list(node.items), depth)]
        if isinstance(node, nodes.Concat):
            return ["".join(str(x) for x in c) for c in self._product(list(node.nodes), depth)]
        if isinstance(node, nodes.BinExpr):
            return [r for a, b in self._product([node.left, node.right], depth) if (r := _binop(node, a, b)) is not None]
        if isinstance(node, nodes.Name):
            if node.name in self.active:
                return []
            self.active.add(node.name)
            try:
                return [v for value in self.assigns.get(node.name, []) for v in self.fold(value, depth)]
            finally:
                self.active.discard(node.name)
        if isinstance(node, nodes.CondExpr):
            return self.fold(node.expr1, depth) + self.fold(node.expr2, depth)
        if isinstance(node, nodes.Getitem):
            base = self.fold(node.node, depth)
            if isinstance(node.arg, nodes.Slice):
                s = node.arg
                bounds = [self.fold(x, depth)[:1] or [None] if x is not None else [None] for x in (s.start, s.stop, s.step)]
                return [b[slice(bounds[0][0], bounds[1][0], bounds[2][0])] for b in base if isinstance(b, str | tuple)]
            return [b[i] for b, i in product(base, self.fold(node.arg, depth)) if isinstance(b, str | tuple)]
        if isinstance(node, nodes.Filter):
            return self._fold_call(node.name, node.node, list(node.args), depth)
        if isinstance(node, nodes.Call) and isinstance(node.node, nodes.Getattr):
            return self._fold_call(node.node.attr, node.node.node, list(node.args), depth)
        return []

    def _fold_call(self, name: str, base_node: nodes.Node | None, args: list[nodes.Expr], depth: int) -> list[Any]:
        base = self.fold(base_node, depth)
        arg_sets = self._product(args, depth) if args else [[]]
        out = []
        for b, a in product(base, arg_sets):
            r = _apply(name, b, a)
            if r is not None:
                out.append(r)
        return out


def _binop(node: nodes.BinExpr, a: Any, b: Any) -> Any:
    if isinstance(node, nodes.Add) and type(a) is type(b):
        return a + b
    if isinstance(node, nodes.Mul):
        if isinstance(a, int) and isinstance(b, int):
            return a * b
        if isinstance(a, str) and isinstance(b, int) and len(a) * b <= _MAX_FOLD:
            return a * b
        if isinstance(b, str) and isinstance(a, int) and len(b) * a <= _MAX_FOLD:
            return b * a
    if isinstance(node, nodes.Mod) and isinstance(a, str) and _safe_format(a, b if isinstance(b, tuple) else (b,)):
        return a % b
    return None


_UNSAFE_FORMAT = re.compile(r"\{[^}]*[.\[!:]|\d{4,}|\*")


def _safe_format(fmt: str, args: Any) -> bool:
    """Folding runs in the scanning process: no attribute lookups, no huge widths or results."""
    if _UNSAFE_FORMAT.search(fmt) is not None:
        return False
    # Each field is at most one argument padded to a width of three digits.
    longest = max((len(str(x)) for x in args), default=0)
    return len(fmt) + (fmt.count("%") + fmt.count("{")) * (999 + longest) <= 4 * _MAX_FOLD


def _joined_length(sep: str, seq: tuple[Any, ...] | str) -> int:
    return sum(len(str(x)) for x in seq) + len(sep) * max(0, len(seq) - 1)


def _apply(name: str, b: Any, a: list[Any]) -> Any:
    """A string filter or method applied to constants, as Jinja/Python would."""
    if name == "join":
        if isinstance(b, str) and a and isinstance(a[0], tuple | str):  # 'sep'.join(seq)
            return b.join(str(x) for x in a[0]) if _joined_length(b, a[0]) <= _MAX_FOLD else None
        if isinstance(b, tuple | str):  # seq|join(sep)
            sep = str(a[0]) if a else ""
            return sep.join(str(x) for x in b) if _joined_length(sep, b) <= _MAX_FOLD else None
    if not isinstance(b, str):
        return None
    if name == "format":
        if not _safe_format(b, a):
            return None
        return b % tuple(a) if "%" in b and a else b.format(*a) if "{" in b else b
    if name == "replace" and len(a) >= 2:
        old, new = str(a[0]), str(a[1])
        count = b.count(old) if old else len(b) + 1
        return b.replace(old, new) if len(b) + count * (len(new) - len(old)) <= _MAX_FOLD else None
    if name == "reverse":
        return b[::-1]
    if name in ("lower", "upper", "strip", "lstrip", "rstrip", "capitalize", "title"):
        return str(getattr(b, name)())
    if name in ("string", "trim", "first", "last", "list"):
        return {"string": b, "trim": b.strip(), "first": b[:1], "last": b[-1:], "list": tuple(b)}[name]
    return None


class _Scanner:
    def __init__(self, source: str, template: str) -> None:
        self.source = source
        self.lines = source.splitlines() or [""]
        self.template = template
        self.report = AstReport()
        self.seen: set[tuple[str, str]] = set()
        self.attr_names: set[str] = set()  # names looked up as attributes, folded
        self.string_built: set[str] = set()  # variables holding render-time built strings

    def add(self, code: str, severity: Severity, message: str, node: nodes.Node | None, needle: str) -> None:
        key = (code, needle)
        if key in self.seen:
            return
        self.seen.add(key)
        excerpt = self.excerpt(node.lineno if node is not None else 1, needle)
        self.report.findings.append(Finding(code, severity, message, excerpt, self.template))

    def excerpt(self, lineno: int, needle: str) -> str:
        line = self.lines[min(max(lineno, 1), len(self.lines)) - 1]
        at = line.find(needle) if needle else -1
        if at < 0:
            return clip(line.strip(), 120)
        start = max(0, at - 40)
        return clip(line[start : at + len(needle) + 40].strip(), 160)

    def scan(self, root: nodes.Template) -> None:
        assigns: dict[str, list[nodes.Node]] = {}
        stored: set[str] = set()
        all_nodes = list(_walk(root))
        for n in all_nodes:
            if isinstance(n, nodes.Assign) and (key := _var_key(n.target)) is not None:
                assigns.setdefault(key, []).append(n.node)
            if isinstance(n, nodes.AssignBlock) and isinstance(n.target, nodes.Name):
                value = _block_value(n)
                if value is not None:
                    assigns.setdefault(n.target.name, []).append(value)
            if isinstance(n, nodes.Name) and n.ctx in ("store", "param"):
                stored.add(n.name)
            if isinstance(n, nodes.Macro):
                stored.add(n.name)
        self.string_built = _string_built(assigns)
        folder = _Folder(assigns)
        folder.prime(all_nodes)
        namespace_calls = {id(n.node) for n in all_nodes if isinstance(n, nodes.Call)}
        for n in all_nodes:
            self.visit(n, folder, stored, namespace_calls)
        # Second pass: strings that look like internal names but were not already reported
        # as the attribute they are used for (a `{% set %}` may precede its use).
        for n in all_nodes:
            # Literal template text is output, not code: it may mention anything.
            if isinstance(n, nodes.Expr) and not isinstance(n, nodes.Name | nodes.TemplateData):
                self.check_strings(n, folder)
        if folder.exhausted:
            self.report.findings.append(Finding(
                "template-too-complex", "medium", "template builds too many values to follow them all; "
                "names built from pieces may be missed", clip(self.source, 120), self.template))
        for m in _ESCAPED_UNDERSCORE.finditer(self.source):
            if ("escaped-underscore", m.group().lower()) not in self.seen:
                self.seen.add(("escaped-underscore", m.group().lower()))
                excerpt = clip(self.source[max(0, m.start() - 40) : m.end() + 60], 160)
                self.report.findings.append(Finding(
                    "escaped-underscore", "high", "template spells an underscore as an escape sequence, "
                    "a way to hide dunder names from keyword filters", excerpt, self.template))

    def visit(self, n: nodes.Node, folder: _Folder, stored: set[str], calls: set[int]) -> None:
        if isinstance(n, nodes.Getattr):
            self.check_attr(n.attr, n)
        elif isinstance(n, nodes.Getitem) and not isinstance(n.arg, nodes.Slice):
            self.check_computed(n.arg, n, folder, "subscript")
        elif isinstance(n, nodes.Filter | nodes.Test):
            self.check_filter(n, folder)
        elif isinstance(n, nodes.NSRef):
            self.check_attr(n.attr, n)
        elif isinstance(n, nodes.Keyword) and n.key.startswith("_"):
            self.add("private-keyword", "critical" if _DUNDER.search(n.key) else "high",
                     f"keyword argument {n.key!r} targets Python internals", n, n.key)
        elif isinstance(n, nodes.Name) and n.ctx == "load":
            self.report.names.add(n.name)
            self.check_name(n, stored, calls)
        elif isinstance(n, nodes.Include | nodes.Import | nodes.FromImport | nodes.Extends):
            self.add("template-loading", "medium", "chat templates have no loader; include/import/extends "
                     "only makes sense in an injection attempt", n, "")

    def check_strings(self, n: nodes.Expr, folder: _Folder) -> None:
        for value in folder.fold(n):
            if not isinstance(value, str) or (m := _DUNDER.search(value)) is None:
                continue
            if not any(value in name for name in self.attr_names):
                needle = _first_const(n) or m.group()
                self.add("dunder-string", "high", f"expression builds the string {clip(value, 60)!r}, a "
                         "Python internal name", n, needle)

    def check_attr(self, name: str, node: nodes.Node, spelled: str | None = None) -> None:
        needle = spelled if spelled is not None else name
        self.attr_names.add(name)
        if _DUNDER.search(name) or name.startswith("__"):
            self.add("dunder-attribute", "critical", f"access to Python internal attribute {name!r}, the "
                     "first step of sandbox escapes such as CVE-2024-34359", node, needle)
        elif name.startswith("_"):
            self.add("private-attribute", "high", f"access to private attribute {name!r}", node, needle)
        elif name in _DANGEROUS_ATTRS:
            self.add("dangerous-attribute", "high", f"access to attribute {name!r}, used to run commands or "
                     "walk frames", node, needle)

    def check_computed(self, arg: nodes.Node, node: nodes.Node, folder: _Folder, how: str) -> None:
        values = [v for v in folder.fold(arg) if isinstance(v, str)]
        for v in values:
            self.check_attr(v, node, spelled=_first_const(arg) or v)
        direct, refs = _direct_and_refs(arg)
        if not values and (direct or refs & self.string_built):
            self.add("computed-attribute-name", "high", f"{how} name is computed at render time from "
                     "strings, a way to hide internal attribute names", node, _first_const(arg) or "")

    def check_filter(self, n: nodes.Filter | nodes.Test, folder: _Folder) -> None:
        if isinstance(n, nodes.Filter) and n.name == "attr":
            if not n.args:
                return
            self.check_computed(n.args[0], n, folder, "|attr")
            values = [v for v in folder.fold(n.args[0]) if isinstance(v, str)]
            if not values:
                self.add("computed-attribute-name", "high", "|attr with a name known only at render time",
                         n, "attr")
            elif not any(v.startswith("_") or v in _DANGEROUS_ATTRS for v in values):
                self.add("attr-filter", "low", "|attr filter; chat templates read attributes directly", n, "attr")
        elif n.name in _ATTRIBUTE_FILTERS:
            targets = [kw.value for kw in n.kwargs if kw.key == "attribute"]
            if n.name in ("map", "selectattr", "rejectattr", "groupby") and n.args:
                targets.append(n.args[0])
            for t in targets:
                for v in folder.fold(t):
                    if isinstance(v, str):
                        self.check_attr(v.split(".")[0], n, spelled=_first_const(t) or v)
                        for part in v.split(".")[1:]:
                            self.check_attr(part, n, spelled=_first_const(t) or v)

    def check_name(self, n: nodes.Name, stored: set[str], calls: set[int]) -> None:
        if "__" in n.name:
            self.add("dunder-name", "critical", f"reference to Python internal name {n.name!r}", n, n.name)
        elif n.name in _SSTI_GLOBALS and (n.name == "self" or n.name not in stored):
            self.add("ssti-global", "high", _SSTI_GLOBALS[n.name], n, n.name)
        elif n.name == "namespace" and id(n) not in calls and "namespace" not in stored:
            self.add("namespace-internals", "high", "the namespace class is used other than by calling it",
                     n, "namespace")


def _block_value(n: nodes.AssignBlock) -> nodes.Node | None:
    """`{% set x %}text{% endset %}`: the body's output is the value."""
    outputs = [b for b in n.body if isinstance(b, nodes.Output)]
    if len(outputs) != len(n.body):
        return None
    return nodes.Concat([x for o in outputs for x in o.nodes], lineno=n.lineno)


def _first_const(node: nodes.Node) -> str | None:
    for n in _walk(node):
        if isinstance(n, nodes.Const) and isinstance(n.value, str) and n.value:
            return n.value
    return None


_KEYWORDS = re.compile(
    r"__[a-z]+__|subclasses|globals|builtins|popen|import|lipsum|cycler|joiner|\|attr|\bself\b|mro\b"
)


def keyword_scan(source: str, template: str) -> list[Finding]:
    """Fallback for unparseable templates: glue string pieces together and grep."""
    text = source
    with contextlib.suppress(UnicodeDecodeError, ValueError):
        text = source.encode("latin-1", "backslashreplace").decode("unicode_escape")
    glued = re.sub(r"""['"\s~+]""", "", text)
    found: dict[str, Finding] = {}
    for m in _KEYWORDS.finditer(glued):
        word = m.group()
        if word not in found:
            sev: Severity = "critical" if word.startswith("__") else "high"
            found[word] = Finding("suspicious-keyword", sev, f"unparseable template mentions {word!r}",
                                  clip(glued[max(0, m.start() - 40) : m.end() + 40], 160), template)
    return list(found.values())


def scan_source(source: str, template: str = "default") -> AstReport:
    """All static findings for one template source."""
    env = template_environment()
    try:
        root = env.parse(source)
    except TemplateSyntaxError as exc:
        report = AstReport(parsed=False)
        line = source.splitlines()[exc.lineno - 1] if exc.lineno and source.splitlines() else source
        report.findings.append(Finding("template-syntax-error", "medium",
                                       f"template does not parse (line {exc.lineno}): {exc.message}",
                                       clip(line.strip(), 160), template))
        report.findings.extend(keyword_scan(source, template))
        return report
    except RecursionError:
        report = AstReport(parsed=False)
        report.findings.append(Finding("template-too-complex", "medium", "template nests too deeply to parse",
                                       clip(source, 120), template))
        report.findings.extend(keyword_scan(source, template))
        return report
    except ValueError as exc:
        # The lexer converts number literals itself, outside its own error handling: a
        # literal of more than 4300 digits raises here. The sandbox child rejects the same
        # template as a compile error, so this finding is the only report of it.
        report = AstReport(parsed=False)
        report.findings.append(Finding("template-syntax-error", "medium", f"template does not parse: {exc}",
                                       clip(source, 120), template))
        report.findings.extend(keyword_scan(source, template))
        return report
    scanner = _Scanner(source, template)
    scanner.scan(root)
    return scanner.report
