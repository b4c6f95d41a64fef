"""`registry inspect`: the facts of a GGUF file, local or remote."""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import TYPE_CHECKING, Any

from registry.cli.common import EXIT_ERROR, EXIT_OK, Handler, Subcommands, context_tokens, parser_limits
from registry.config import Settings

if TYPE_CHECKING:
    from registry.hub.http import RemoteHeader


def add_inspect(sub: Subcommands) -> tuple[str, Handler]:
    p = sub.add_parser(
        "inspect",
        help="show the facts of a GGUF file, local or remote (all shards of a split model)",
        description="Parse the header of a GGUF file (no tensor data is read) and show its facts. A remote "
        "file is read by HTTP range requests, header bytes only.",
    )
    p.add_argument("path", metavar="PATH",
                   help="a .gguf file, an http(s) URL or a hub path org/name/file.gguf; for a split model "
                   "any of its shards")  # fmt: skip
    p.add_argument("--revision", default="main", help="branch, tag or commit of a hub path (default: main)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--tensors", action="store_true", help="also list every tensor")
    p.add_argument("--context", type=context_tokens, metavar="TOKENS",
                   help="also size the KV cache, and what llama.cpp allocates (registry/gguf/memory.py), for this "
                   "many tokens of context (e.g. 8192 or 8K)")  # fmt: skip
    return "inspect", _cmd_inspect


def _cmd_inspect(args: argparse.Namespace, settings: Settings) -> int:
    # Imported here so that `registry --help` and other commands do not load numpy.
    import io
    import json

    from registry.gguf.compat import compat_lines, error_findings, runs_in_llama_cpp
    from registry.gguf.errors import GGUFError
    from registry.gguf.facts import derive_facts
    from registry.gguf.summary import facts_json, facts_text
    from registry.hub.errors import HubError
    from registry.hub.local import read_artifact_headers

    path: str = args.path
    url = _remote_url(path, args.revision, settings)
    fetched: dict[str, int] | None = None
    try:
        if url is not None:
            remote = _read_remote(url, settings)
            headers, sizes, paths = (
                [r.header for r in remote],
                [r.file_size for r in remote],
                [r.url for r in remote],
            )
            fetched = {"files": len(remote), "bytes": sum(r.bytes_fetched for r in remote),
                       "requests": sum(r.requests for r in remote)}  # fmt: skip
        else:
            local = read_artifact_headers(
                path, limits=parser_limits(settings), first_window=settings.hub.first_window
            )
            headers, sizes, paths = (
                [h.header for h in local],
                [h.file_size for h in local],
                [h.path for h in local],
            )
        facts = derive_facts(headers, file_sizes=sizes)
    except (GGUFError, HubError) as exc:
        err, text = exc.to_dict(), str(exc)
        refusal = [f.to_dict() for f in error_findings(exc)] if isinstance(exc, GGUFError) else []
    except Exception as exc:  # a parser bug on a hostile file must still not print a traceback
        text = f"{type(exc).__name__}: {exc}"
        refusal = []
        err = {"code": "internal_error", "message": text, "field": None, "offset": None}
    else:
        findings, capabilities = _template_scan(path, headers[0])
        compat = _compat(path, headers, facts.kind)
        runs = None if compat is None else runs_in_llama_cpp(compat)
        compat_json = None if compat is None else [f.to_dict() for f in compat]
        memory = _memory(headers, args.context) if args.context is not None else None
        if args.json:
            # ASCII-only JSON: a model name or template in any script survives any terminal.
            doc = facts_json(facts, headers, tensors=args.tensors, paths=paths, template_findings=findings,
                             context=args.context, template_capabilities=capabilities)  # fmt: skip
            doc["llama_cpp_findings"], doc["runs_in_llama_cpp"] = compat_json or [], runs
            if fetched is not None:
                doc["fetched"] = fetched
            if memory is not None:
                doc["memory"] = {"cpu": memory[0], "gpu": memory[1]}
            print(json.dumps(doc, indent=2))
        else:
            if isinstance(sys.stdout, io.TextIOWrapper):
                sys.stdout.reconfigure(errors="replace")  # a non-UTF-8 terminal gets "?"s, not a crash
            title = path if len(headers) == 1 else f"{path} (split model, {len(headers)} shards)"
            sys.stdout.write(facts_text(facts, headers, title=title, tensors=args.tensors, template_findings=findings,
                                        context=args.context, template_capabilities=capabilities))  # fmt: skip
            sys.stdout.write(
                "".join(f"{label:<22}{text}\n" for label, text in compat_lines(compat_json, runs))
            )
            if memory is not None:
                sys.stdout.write(memory[2])
            if fetched is not None:
                print(f"fetched {fetched['bytes']:,} bytes in {fetched['requests']} request(s) "
                      f"for {fetched['files']} file(s)")  # fmt: skip
        return EXIT_OK
    print(f"registry: inspect: {path}: {err['code']}: {text}", file=sys.stderr)
    for f in refusal:
        print(
            f"registry: inspect: {path}: llama.cpp refuses it too: {f['code']} {f['message']}",
            file=sys.stderr,
        )
    if args.json:
        print(json.dumps({"error": err, **({"llama_cpp_findings": refusal} if refusal else {})}))
    return EXIT_ERROR


def _memory(headers: list[Any], context: int) -> tuple[dict[str, object], dict[str, object], str] | None:
    """The memory estimate at `context` tokens: as JSON on a CPU and on a GPU, and as text."""
    from registry.gguf.memory import MemorySettings, estimate, estimate_dict, estimate_text
    from registry.gguf.memory_profile import memory_profile

    first = next((h for h in headers if not h.get("split.no")), headers[0])  # shard 0 carries the metadata
    profile = memory_profile(first, [t for h in headers for t in h.tensors])
    if profile is None:
        return None
    cpu = estimate(profile, MemorySettings(context=context))
    gpu = estimate(profile, MemorySettings(context=context, offload="gpu"))
    return estimate_dict(cpu), estimate_dict(gpu), estimate_text(cpu, gpu)


_HUB_PATH = re.compile(r"^[\w.-]+/[\w.-]+/.+\.gguf$", re.IGNORECASE)


def _remote_url(path: str, revision: str, settings: Settings) -> str | None:
    """The URL to read for PATH: itself for http(s), a /resolve/ URL for a hub path that is
    not a local file, None for a local file."""
    if path.startswith(("http://", "https://")):
        return path
    if os.path.exists(path) or not _HUB_PATH.match(path):
        return None
    from registry.hub.http import resolve_url  # aiohttp: only for a file to fetch

    org, name, file = path.split("/", 2)
    return resolve_url(settings.hub.endpoint, f"{org}/{name}", revision, file)


def _read_remote(url: str, settings: Settings) -> list[RemoteHeader]:
    import asyncio

    from registry.hub.http import read_remote_artifact_headers

    return asyncio.run(read_remote_artifact_headers(url, settings.hub, limits=parser_limits(settings)))


def _compat(path: str, headers: list[Any], kind: str) -> Any:
    """llama.cpp findings of the headers and the chat template (a sandbox child renders it,
    only when there is one); the template's are left out when the sandbox cannot start."""
    from registry.gguf.compat import header_findings, worst_first
    from registry.safety.compat import template_findings
    from registry.safety.sandbox import SandboxPool, SandboxUnavailable

    found = list(header_findings(headers, kind))
    if isinstance(headers[0].get("tokenizer.chat_template"), str):
        try:
            with SandboxPool() as pool:
                found += template_findings(headers[0], pool)
        except SandboxUnavailable as exc:
            print(
                f"registry: inspect: {path}: chat template not checked for llama.cpp: {exc}", file=sys.stderr
            )
    return worst_first(found)


def _template_scan(path: str, header: Any) -> tuple[list[dict[str, str]] | None, list[str] | None]:
    """Safety findings for the file's chat templates as JSON, worst first, and what the
    templates can do (CAPABILITIES order); (None, None): not scanned.

    The templates are rendered only in a sandbox child process (started for this call,
    and only when the file has a template); a sandbox that cannot start is a warning, not
    a failed inspect, and the findings then read "not scanned", never clean.
    """
    from registry.safety import findings_to_json, scan_header_report
    from registry.safety.capabilities import in_order
    from registry.safety.sandbox import SandboxUnavailable

    try:
        report = scan_header_report(header)
    except SandboxUnavailable as exc:
        print(f"registry: inspect: {path}: chat template not scanned: {exc}", file=sys.stderr)
        return None, None
    return findings_to_json(report.findings), in_order(report.capabilities)
