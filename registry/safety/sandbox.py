"""Rendering untrusted chat templates, only ever in a separate, limited process.

The parent (`SandboxPool`) keeps one or more long-lived child processes running
`python -m registry.safety.sandbox`, because starting Python and importing jinja2 costs
50-100 ms while rendering a chat template costs well under a millisecond. One request
carries one template and all the conversations to render it with; the reply carries one
result per conversation.

Defence in depth, from the inside out:
1. jinja2's `ImmutableSandboxedEnvironment` (no `_`-attributes, no mutation of lists and
   dicts, sandboxed `str.format`), with unsafe attribute access raising at once instead of
   yielding a silent Undefined, and `*`, `**` and `+` checked so one expression cannot
   build a huge value.
2. The child runs with RLIMIT_AS (memory), RLIMIT_FSIZE 0 (no file writes), RLIMIT_NPROC
   0 (no new processes for non-root users), RLIMIT_CORE 0, a scrubbed environment (no
   tokens or database URLs to steal) and its own session, so an escape finds little.
3. The parent enforces a wall-clock limit per request and SIGKILLs the child's process
   group when it is exceeded or the reply is oversized; the next request starts a fresh
   child. A child that hit MemoryError exits after replying, for the same reason.

Wire format: 4-byte big-endian length, then UTF-8 JSON, in both directions.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import selectors
import signal
import struct
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any, Literal, Protocol

from jinja2 import nodes
from jinja2.exceptions import TemplateError
from jinja2.ext import Extension, loopcontrols
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

__all__ = [
    "RenderJob",
    "RenderOutcome",
    "RenderResult",
    "Renderer",
    "SandboxLimits",
    "SandboxPool",
    "SandboxUnavailable",
    "template_environment",
]

_FRAME = struct.Struct(">I")
# What `strftime_now` returns in the sandbox: fixed so renders (and findings) are
# reproducible and a template cannot read the clock to behave differently over time.
FIXED_NOW = datetime(2024, 7, 26, 12, 0, 0)


# --------------------------------------------------------------------------- environment


class _GenerationTag(Extension):
    """`{% generation %}...{% endgeneration %}` as transformers accepts it: renders its body.

    transformers uses the tag to mark assistant tokens for training masks; templates that
    carry it must parse here too, or every such template would be a syntax-error finding.
    """

    tags = {"generation"}  # noqa: RUF012 (jinja2 declares it as a plain attribute)

    def parse(self, parser: Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


class TemplateRaised(TemplateError):
    """The template called `raise_exception(...)`: it rejects this conversation shape."""


class OutputLimitExceeded(Exception):
    pass


class _ChatSandbox(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**", "+"})

    def __init__(self, output_limit: int) -> None:
        # Same options as transformers' chat template renderer so templates behave alike.
        super().__init__(trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, loopcontrols])
        self.output_limit = output_limit
        self.filters["tojson"] = _tojson
        self.globals["raise_exception"] = _raise_exception
        self.globals["strftime_now"] = _strftime_now

    def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
        # The stock sandbox returns an Undefined that only raises when used further; a probe
        # like `{{ x.__class__ }}` would then pass silently. Any attempt is the finding.
        raise SecurityError(f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe")

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        problem = _oversized(operator, left, right, self.output_limit)
        if problem is not None:
            raise OutputLimitExceeded(problem)
        return super().call_binop(context, operator, left, right)


def _oversized(operator: str, left: Any, right: Any, limit: int) -> str | None:
    """Why `left <operator> right` would build a value too big to allow, or None."""
    if operator == "*":
        for seq, n in ((left, right), (right, left)):
            if isinstance(seq, str | list | tuple) and isinstance(n, int) and len(seq) * n > limit:
                return f"repetition would build {len(seq) * n} items"
    elif operator == "**":
        if isinstance(right, int) and isinstance(left, int) and abs(left) > 1 and right > 64:
            return f"power {right} is too large"
    elif operator == "+" and hasattr(left, "__len__") and hasattr(right, "__len__") and len(left) + len(right) > limit:
        return "concatenation exceeds the output limit"
    return None


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    # transformers' override: no HTML escaping, so rendered tool JSON matches inference.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise_exception(message: str) -> None:
    raise TemplateRaised(str(message))


def _strftime_now(fmt: str) -> str:
    return FIXED_NOW.strftime(str(fmt)[:200])


def template_environment(output_limit: int = 1 << 20) -> ImmutableSandboxedEnvironment:
    """The only environment templates are compiled in. The parent uses it to parse only."""
    return _ChatSandbox(output_limit)


# --------------------------------------------------------------------------- protocol types

ErrorKind = Literal["security", "raised", "template", "output_limit", "memory", "recursion", "error"]
_ERROR_KINDS = frozenset({None, "security", "raised", "template", "output_limit", "memory", "recursion", "error"})
OutcomeStatus = Literal["ok", "timeout", "memory", "crashed", "compile_error"]


@dataclass(frozen=True, slots=True)
class RenderJob:
    source: str
    contexts: Sequence[Mapping[str, Any]]  # JSON-able render contexts, one per conversation


@dataclass(frozen=True, slots=True)
class RenderResult:
    output: str | None = None
    error: ErrorKind | None = None
    message: str = ""


@dataclass(frozen=True, slots=True)
class RenderOutcome:
    status: OutcomeStatus
    results: tuple[RenderResult, ...] = ()
    message: str = ""
    elapsed: float = 0.0


class Renderer(Protocol):
    """What scanning needs from a sandbox. `SandboxPool` also offers `submit`, which the
    scanner uses when present to overlap its own analysis with the render."""

    def render(self, job: RenderJob) -> RenderOutcome: ...


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    timeout: float = 2.0  # wall seconds for one template, all conversations
    memory: int = 256 << 20  # RLIMIT_AS of the child, bytes
    output: int = 256 << 10  # characters per rendered conversation
    startup_timeout: float = 20.0  # generous: the machine may be busy; start-up is amortised


# --------------------------------------------------------------------------- child side


def _set_limits(memory: int) -> None:
    import resource

    for res, value in (
        (resource.RLIMIT_AS, memory),
        (resource.RLIMIT_FSIZE, 0),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_NPROC, 0),
    ):
        with contextlib.suppress(ValueError, OSError):  # e.g. a lower hard limit: keep it
            resource.setrlimit(res, (value, value))


def _render_one(env: ImmutableSandboxedEnvironment, template: Any, ctx: Mapping[str, Any], limit: int) -> RenderResult:
    try:
        size = 0
        parts: list[str] = []
        for chunk in template.generate(**ctx):
            size += len(chunk)
            if size > limit:
                raise OutputLimitExceeded(f"output exceeds {limit} characters")
            parts.append(chunk)
        return RenderResult(output="".join(parts))
    except SecurityError as exc:
        return RenderResult(error="security", message=str(exc))
    except TemplateRaised as exc:
        return RenderResult(error="raised", message=str(exc))
    except OutputLimitExceeded as exc:
        return RenderResult(error="output_limit", message=str(exc))
    except RecursionError:
        return RenderResult(error="recursion", message="maximum recursion depth exceeded")
    except TemplateError as exc:
        return RenderResult(error="template", message=f"{type(exc).__name__}: {exc}")
    except MemoryError:
        raise
    except Exception as exc:  # a template may raise anything (TypeError, ValueError...)
        return RenderResult(error="error", message=f"{type(exc).__name__}: {exc}")


_COMPILED_MAX = 64


def _compile(env: ImmutableSandboxedEnvironment, source: str, cache: OrderedDict[str, Any]) -> Any:
    # The files of one repo usually share a template, and compiling costs ten times more
    # than rendering every conversation.
    template = cache.pop(source, None)
    if template is None:
        template = env.from_string(source)
    cache[source] = template
    while len(cache) > _COMPILED_MAX:
        cache.popitem(last=False)
    return template


def _handle(
    env: ImmutableSandboxedEnvironment, request: Mapping[str, Any], limit: int, cache: OrderedDict[str, Any]
) -> dict[str, Any]:
    try:
        template = _compile(env, request["source"], cache)
    except (TemplateError, RecursionError, SyntaxError, ValueError) as exc:
        return {"status": "compile_error", "message": f"{type(exc).__name__}: {exc}"}
    results = []
    for ctx in request["contexts"]:
        r = _render_one(env, template, ctx, limit)
        results.append({"output": r.output, "error": r.error, "message": r.message[:500]})
    return {"status": "ok", "results": results}


def _read_frame(stream: IO[bytes]) -> bytes | None:
    head = stream.read(_FRAME.size)
    if len(head) < _FRAME.size:
        return None
    (n,) = _FRAME.unpack(head)
    body = stream.read(n)
    return body if len(body) == n else None


def _write_frame(stream: IO[bytes], payload: Mapping[str, Any]) -> None:
    # ASCII escapes: a template can produce lone surrogates, which are not valid UTF-8.
    data = json.dumps(payload).encode("ascii")
    stream.write(_FRAME.pack(len(data)) + data)
    stream.flush()


def child_main(argv: Sequence[str]) -> int:
    memory, output_limit = int(argv[0]), int(argv[1])
    env = template_environment(output_limit)
    env.from_string("{{ x }}").render(x=1)  # import and warm everything before the limits
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    _set_limits(memory)
    _write_frame(stdout, {"status": "ready", "pid": os.getpid()})
    cache: OrderedDict[str, Any] = OrderedDict()
    while (frame := _read_frame(stdin)) is not None:
        try:
            reply = _handle(env, json.loads(frame), output_limit, cache)
        except MemoryError:
            reply = {"status": "memory", "message": "memory limit exceeded"}
        try:
            _write_frame(stdout, reply)
        except MemoryError:
            return 3
        if reply["status"] == "memory" or any(r.get("error") == "memory" for r in reply.get("results", ())):
            return 0  # a heap that hit the limit is not worth reusing
    return 0


# --------------------------------------------------------------------------- parent side


class SandboxUnavailable(RuntimeError):
    """The sandbox process cannot be started: an operational error, not a finding."""


class _SandboxDied(Exception):
    def __init__(self, status: OutcomeStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


def _child_env() -> dict[str, str]:
    root = str(Path(__file__).resolve().parent.parent.parent)
    # Only what Python needs: secrets in the parent's environment stay out of reach.
    return {"PATH": os.defpath, "PYTHONPATH": root, "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}


class _Worker:
    """One child process; used by one thread at a time (the pool guarantees it)."""

    def __init__(self, limits: SandboxLimits) -> None:
        self.limits = limits
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def _start(self) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [sys.executable, "-s", "-m", "registry.safety.sandbox", str(self.limits.memory), str(self.limits.output)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=_child_env(),
            cwd="/",
            close_fds=True,
            start_new_session=True,
        )
        self.proc = proc
        self.starts += 1
        try:
            ready = self._receive(proc, time.monotonic() + self.limits.startup_timeout, 4096)
        except _SandboxDied as exc:
            self.kill()
            raise SandboxUnavailable(f"sandbox process failed to start: {exc}") from None
        if ready.get("status") != "ready":
            self.kill()
            raise SandboxUnavailable(f"sandbox process failed to start: {ready!r}")
        return proc

    def kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: only what it started
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()
        proc.wait()

    def _receive(self, proc: subprocess.Popen[bytes], deadline: float, max_bytes: int) -> dict[str, Any]:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        buf = bytearray()
        need = _FRAME.size
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while len(buf) < need:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    raise _SandboxDied("timeout", "render time limit exceeded")
                chunk = os.read(fd, need - len(buf))  # never past this frame
                if not chunk:
                    code = proc.poll()
                    raise _SandboxDied("crashed", f"sandbox process exited (code {code})")
                buf += chunk
                if len(buf) >= _FRAME.size and need == _FRAME.size:
                    (n,) = _FRAME.unpack_from(buf)
                    if n > max_bytes:
                        raise _SandboxDied("crashed", f"sandbox reply of {n} bytes exceeds the cap")
                    need = _FRAME.size + n
        try:
            decoded = json.loads(bytes(buf[_FRAME.size : need]))
        except ValueError:
            raise _SandboxDied("crashed", "sandbox reply is not JSON") from None
        if not isinstance(decoded, dict):
            raise _SandboxDied("crashed", "sandbox reply is not an object")
        return decoded

    def send(self, job: RenderJob) -> Callable[[], RenderOutcome]:
        """Write the request now; the returned function waits for the outcome.

        Splitting the two lets the caller analyse the template in this process while the
        child compiles and renders it.
        """
        t0 = time.monotonic()
        proc = self.proc if self.proc is not None and self.proc.poll() is None else None
        if proc is None:
            self.kill()
            proc = self._start()
        assert proc.stdin is not None
        payload = json.dumps({"source": job.source, "contexts": list(job.contexts)}).encode()
        deadline = time.monotonic() + self.limits.timeout
        # Replies hold at most one capped output per context (JSON \uXXXX\uXXXX: 12 bytes a char).
        cap = len(job.contexts) * (self.limits.output * 12 + 1024) + 4096
        try:
            proc.stdin.write(_FRAME.pack(len(payload)) + payload)
            proc.stdin.flush()
        except OSError as exc:  # BrokenPipeError included: the child died
            self.kill()
            failed = RenderOutcome("crashed", message=f"sandbox pipe failed: {exc}", elapsed=time.monotonic() - t0)
            return lambda: failed

        def finish() -> RenderOutcome:
            # The child's time runs from the send; if the caller was slower than that, a
            # reply already written still gets a moment to be read rather than a timeout.
            try:
                reply = self._receive(proc, max(deadline, time.monotonic() + 0.05), cap)
            except OSError as exc:
                self.kill()
                return RenderOutcome("crashed", message=f"sandbox pipe failed: {exc}", elapsed=time.monotonic() - t0)
            except _SandboxDied as exc:
                self.kill()
                return RenderOutcome(exc.status, message=str(exc), elapsed=time.monotonic() - t0)
            outcome = _parse_reply(reply, time.monotonic() - t0)
            if outcome.status in ("memory", "crashed") or any(r.error == "memory" for r in outcome.results):
                self.kill()  # it exits on its own after memory trouble; a malformed reply means distrust
            return outcome

        return finish

    def render(self, job: RenderJob) -> RenderOutcome:
        return self.send(job)()


def _parse_reply(reply: Mapping[str, Any], elapsed: float) -> RenderOutcome:
    """Validate a child's reply: a child is only trusted as far as its shape checks out."""
    status, raw = reply.get("status"), reply.get("results", [])
    if status not in ("ok", "memory", "compile_error") or not isinstance(raw, list):
        return RenderOutcome("crashed", message=f"malformed sandbox reply (status {status!r})", elapsed=elapsed)
    results = []
    for r in raw:
        ok = isinstance(r, dict) and isinstance(r.get("output"), str | None) and r.get("error") in _ERROR_KINDS
        if not ok:
            return RenderOutcome("crashed", message="malformed sandbox result", elapsed=elapsed)
        results.append(RenderResult(output=r["output"], error=r["error"], message=str(r.get("message", ""))))
    return RenderOutcome(status, tuple(results), str(reply.get("message", "")), elapsed)


@dataclass
class SandboxPool:
    """A few long-lived sandbox processes, reused across an indexing run.

    Thread-safe: each `render` borrows one worker, so up to `size` templates render at once
    (call it through `asyncio.to_thread` from async code). Children start lazily and are
    restarted after a timeout, crash or memory blow-up. Use as a context manager, or call
    `close()`, to end the children.
    """

    size: int = 1
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    _idle: queue.Queue[_Worker] = field(init=False, repr=False)
    _all: list[_Worker] = field(init=False, repr=False)
    _lock: threading.Lock = field(init=False, repr=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError("a sandbox pool needs at least one worker")
        self._all = [_Worker(self.limits) for _ in range(self.size)]
        self._idle = queue.Queue()
        for w in self._all:
            self._idle.put(w)

    def render(self, job: RenderJob) -> RenderOutcome:
        return self.submit(job)()

    def submit(self, job: RenderJob) -> Callable[[], RenderOutcome]:
        """Start rendering on a borrowed worker; call the result once to wait and return it."""
        worker = self._idle.get()
        try:
            finish = worker.send(job)
        except BaseException:
            self._idle.put(worker)
            raise
        taken = False

        def result() -> RenderOutcome:
            nonlocal taken
            if taken:
                raise RuntimeError("render result already taken")
            taken = True
            try:
                return finish()
            finally:
                self._idle.put(worker)

        return result

    def warm(self) -> None:
        """Start every child now rather than on the first template."""
        borrowed = [self._idle.get() for _ in range(self.size)]
        try:
            for w in borrowed:
                w.render(RenderJob("", ()))
        finally:
            for w in borrowed:
                self._idle.put(w)

    @property
    def starts(self) -> int:
        """How many child processes were started so far (restarts included)."""
        return sum(w.starts for w in self._all)

    def close(self) -> None:
        with self._lock:
            for w in self._all:
                w.kill()

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
