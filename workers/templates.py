"""Chat template scanning for the artifact builders (`workers.index`, `workers.crawl`):
safety findings and capabilities.

One `TemplateScanner` per indexing run or crawl: it owns one sandbox pool, started on the
first template (a run over files without templates starts no process), and one scan
cache, so a template shared by every quantization in a repo, or by a whole family of
repos, is scanned once. `close()` ends the sandbox children.

`None` from a scan means "not scanned" and is stored as NULL, never as clean: the
sandbox could not start (an operational error, logged) or the scanner itself failed on
this header (a bug, logged with its traceback). Neither costs the artifact its row.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator
from typing import Any

from registry.gguf.compat import CompatFinding, error_findings, header_findings, worst_first
from registry.gguf.errors import GGUFError
from registry.safety import (
    SandboxLimits,
    SandboxPool,
    ScanCache,
    TemplateReport,
    cached_header_report,
    scan_header_report,
)
from registry.safety.compat import TemplateCheck, template_check, token_text
from registry.safety.sandbox import SandboxUnavailable

log = logging.getLogger(__name__)


class TemplateScanner:
    """Findings for the chat templates of parsed GGUF headers; thread-safe, blocking or async."""

    def __init__(self, *, pool_size: int = 1, limits: SandboxLimits | None = None) -> None:
        self.pool_size = pool_size
        self.limits = limits or SandboxLimits()
        self.cache = ScanCache()
        self.unavailable = 0  # scans skipped because the sandbox could not start
        # llama.cpp template findings by what decides them: a repo's files share one template.
        self.compat_cache: dict[tuple[Any, ...], TemplateCheck] = {}
        self._pool: SandboxPool | None = None
        self._lock = threading.Lock()
        self._closed = False

    def _runner(self) -> SandboxPool:
        with self._lock:
            if self._closed:
                raise RuntimeError("template scanner is closed")
            if self._pool is None:
                self._pool = SandboxPool(size=self.pool_size, limits=self.limits)
            return self._pool

    def scan_sync(self, header: Any) -> TemplateReport | None:
        """Findings (worst first; (): clean or none) and capabilities of the header's
        templates; None when not scanned. Blocking."""
        try:
            return scan_header_report(header, runner=self._runner(), cache=self.cache)
        except SandboxUnavailable as exc:
            self.unavailable += 1
            # Once per run is enough to tell the operator; every artifact records NULL.
            if self.unavailable == 1:
                log.error("chat template scanning unavailable, artifacts are stored as not scanned: %s", exc)
            return None
        except Exception:
            log.exception("chat template scanner failed; the artifact is stored as not scanned")
            return None

    def compat_sync(self, header: Any) -> TemplateCheck | None:
        """llama.cpp findings of the header's chat template; None when not checked. Blocking."""
        source, add_bos = header.get("tokenizer.chat_template"), header.get("tokenizer.ggml.add_bos_token")
        key = (source if isinstance(source, str) else None, token_text(header, "bos"), token_text(header, "eos"),
               add_bos is True)  # fmt: skip
        if (hit := self.compat_cache.get(key)) is not None:
            return hit
        try:
            found = template_check(header, self._runner())
        except SandboxUnavailable:
            return None
        except Exception:
            log.exception("llama.cpp template check failed; the artifact's findings leave it out")
            return None
        if len(self.compat_cache) < 1024:
            self.compat_cache[key] = found
        return found

    async def scan(self, header: Any) -> TemplateReport | None:
        """`scan_sync` off the event loop: parsing and the sandbox round trip block. A header
        whose templates are all in the cache (a repo's quants share theirs) is answered
        here: a hop to a thread and back would cost more than the lookup."""
        try:
            hit = cached_header_report(header, self.cache)
        except Exception:
            hit = None  # scan_sync says why, and the artifact is stored as not scanned
        if hit is not None:
            return hit
        return await asyncio.to_thread(self.scan_sync, header)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)


def template_columns(scan: TemplateReport | None) -> dict[str, Any]:
    """An ArtifactRecord's template fields from a scan (None: not scanned)."""
    if scan is None:
        return {"chat_template_findings": None, "chat_template_capabilities": None}
    return {"chat_template_findings": scan.findings, "chat_template_capabilities": scan.capabilities}


def compat_columns(headers: Any, kind: str, scanner: TemplateScanner | None) -> dict[str, Any]:
    """An ArtifactRecord's llama.cpp findings: the headers' (for a file of this `kind`) and the
    first shard's chat template's."""
    found: list[CompatFinding] = list(header_findings(headers, kind))
    check = scanner.compat_sync(headers[0]) if scanner is not None and headers else None
    if check is not None:
        found += check.findings
    render = check.render_sha256 if check is not None else None
    return {"llama_cpp_findings": worst_first(found), "chat_template_render_sha256": render}


def error_columns(exc: GGUFError) -> dict[str, Any]:
    """An error row's llama.cpp findings: the refusal its error stands for, else not checked."""
    return {"llama_cpp_findings": error_findings(exc) or None}


@contextlib.asynccontextmanager
async def scanner_scope(scanner: TemplateScanner | None = None) -> AsyncIterator[TemplateScanner]:
    """The caller's scanner, or a new one for this scope, closed when the scope ends."""
    if scanner is not None:
        yield scanner
        return
    own = TemplateScanner()
    try:
        yield own
    finally:
        await own.aclose()
