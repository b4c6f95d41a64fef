"""`registry show`: the catalog's page of an artifact or a repo."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from registry.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    Handler,
    Subcommands,
    add_param,
    catalog_call,
    catalog_id,
    catalog_set_up,
    file_size,
    memory_text,
    terminal_text,
)
from registry.config import Settings
from registry.gguf.compat.codes import compat_lines
from registry.responses.params import DETAIL_PARAMS, MEMORY_OPTION_PARAMS, memory_options

if TYPE_CHECKING:
    from registry.responses import Artifact


def add_show(sub: Subcommands) -> tuple[str, Handler]:
    p = sub.add_parser(
        "show",
        help="show what the catalog knows of an artifact or a repo (no network)",
        description="Print an artifact's page from the catalog (facts, quant mix, what it needs to run, its "
        "files with their sha256 and download URLs, chat template findings, latest verification, the "
        "projectors beside it) or a repo's (its facts, lineage and artifacts): what the API answers at "
        "/v1/artifacts/ID and /v1/repos/ORG/NAME, with --json the same JSON. REPO:PATH and REPO:TAG name an "
        "artifact of a crawled repo as `registry download` does. Exit status: 0 shown, 1 not in the catalog.",
    )
    p.add_argument("target", metavar="ID | REPO[:PATH|:TAG]",
                   help="a catalog artifact id, a repo org/name (any case), or one of its files: org/name:file.gguf "
                   "(any shard) or org/name:Q4_K_M")  # fmt: skip
    context = next(param for param in DETAIL_PARAMS if param.name == "context")
    add_param(p, context, {"context"})
    for param in MEMORY_OPTION_PARAMS:
        add_param(p, param, {param.name})
    p.add_argument("--json", action="store_true", help="print the page as the API answers it")
    return "show", _cmd_show


class _NotInCatalog(Exception):
    """What `registry show` was asked for is not in the catalog."""


def _cmd_show(args: argparse.Namespace, settings: Settings) -> int:
    import io

    import msgspec

    from registry.api import pages, reads
    from registry.catalog import lineage
    from registry.catalog.db import Database
    from registry.responses import encode_text
    from workers.verify import TargetError

    target: str = args.target
    endpoint = settings.hub.endpoint
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="replace")  # a non-UTF-8 terminal gets "?"s, not a crash

    async def repo_row(session: Any, repo_id: str) -> Any:
        repo = await reads.get_repo(session, repo_id)
        if repo is None or repo.revision is None:  # an id the hub moved: the repo it moved to
            moved = await lineage.moved_to(session, repo_id)
            if moved is not None and (found := await reads.get_repo(session, moved)) is not None:
                print(terminal_text(f"registry: show: the hub has moved {repo_id} to {found.repo_id}"), file=sys.stderr)
                return found
        if repo is None:
            raise _NotInCatalog(f"no repo {repo_id} in the catalog")
        return repo

    async def work() -> int:
        async with Database.from_settings(settings) as db:
            if not await catalog_set_up(db, "show"):
                return EXIT_ERROR
            async with db.sessions() as session:
                artifact_id: int | None = catalog_id(target)
                repo = None
                if artifact_id is None:
                    repo_id, colon, name = target.partition(":")
                    repo = await repo_row(session, repo_id)
                    if not colon:
                        if args.context is not None:
                            print("registry: show: --context sizes an artifact: give ID or REPO:PATH",
                                  file=sys.stderr)  # fmt: skip
                            return EXIT_USAGE
                        body = await pages.repo_page(session, repo, endpoint=endpoint)
                        print(encode_text(body) if args.json else _repo_text(msgspec.to_builtins(body)))
                        return EXIT_OK
                    artifact_id = await _artifact_named(session, repo, name)
                page = await pages.artifact_page(session, artifact_id, endpoint=endpoint, context=args.context,
                                                 memory_options=memory_options(vars(args)))  # fmt: skip
                named = None if page is None or args.json else await _tag_naming(session, page, repo)
        if page is None:
            raise _NotInCatalog(f"no artifact with id {artifact_id}")
        # The text is made from the JSON's values: the two show the same.
        print(encode_text(page) if args.json else _artifact_text(msgspec.to_builtins(page), args.context, named))
        return EXIT_OK

    try:
        return catalog_call("show", work)
    except (_NotInCatalog, TargetError) as exc:
        print(terminal_text(f"registry: show: {target}: {exc}"), file=sys.stderr)
        return EXIT_ERROR


async def _artifact_named(session: Any, repo: Any, name: str) -> int:
    """The id of the artifact of `repo` that `name` names: a path of any of its shards, or a
    quantization tag as its file name carries it (`workers.verify.pick_artifact`'s rules)."""
    from registry.api import reads
    from workers.verify import TargetError, tagged_path

    if (found := await reads.artifact_of_file(session, repo.id, name)) is not None:
        return int(found)
    if name.lower().endswith(".gguf"):
        raise TargetError(f"{repo.repo_id} has no GGUF file {name!r} in the catalog")
    by_path = await reads.artifact_paths(session, repo.id)
    return by_path[tagged_path(repo.repo_id, sorted(by_path), name)]


async def _tag_naming(session: Any, page: Artifact, repo: Any = None) -> str | None:
    """`REPO:TAG` when the quantization tag in the artifact's file name picks it and nothing
    else of its hub repo (`tagged_path`): the short name `registry download` and llama.cpp's
    `-hf` take. None for a local folder's file, a gone one, or a name without a tag of its own."""
    from registry.api import reads
    from registry.gguf.filename import quant_label_from_filename
    from workers.verify import TargetError, tagged_path

    label = quant_label_from_filename(page.path)
    if repo is None:  # `repo`: the page's repo row, when the caller has read it already
        repo = await reads.get_repo(session, page.repo)
    if label is None or repo is None or repo.source != "hub" or page.status == "gone":
        return None
    try:
        picked = tagged_path(repo.repo_id, sorted(await reads.artifact_paths(session, repo.id)), label)
    except TargetError:
        return None
    return f"{repo.repo_id}:{label}" if picked == page.path else None


def _artifact_text(page: dict[str, Any], context: int | None, named: str | None = None) -> str:
    """An artifact page for people: its facts as `registry inspect` shows them, then what
    the catalog adds (status, the `REPO:TAG` that names it, memory, popularity, verification,
    projectors) and its files."""
    from registry.gguf.summary import facts_from_json, facts_text, label_lines, table

    title = terminal_text(f"{page['id']}  {page['repo']}/{page['path']}")
    status = page["status"] + (f" at revision {page['revision']}" if page["revision"] else "")
    if page["error"]:
        status += f": {page['error']['code']}: {page['error']['message']}"
    catalog = [("status", status)]
    if named is not None:
        catalog.append(("pick with", f"{named} (registry download; llama.cpp -hf)"))
    if (memory := page["memory"]) is not None:
        catalog += _memory_lines(memory, page.get("memory_estimate"))
    when = f"; modified {page['last_modified'][:10]}" if page["last_modified"] else ""
    catalog.append(("popularity", f"{page['downloads']:,} downloads, {page['likes']:,} likes{when}"))
    v = page["latest_verification"]
    catalog.append(("verified", "never" if v is None else _verification_line(v)))
    runs = page["runs_in_llama_cpp"]
    catalog += compat_lines(page["llama_cpp_findings"] if runs is not None else None, runs)
    if (how := page.get("header_read")) is not None:
        catalog.append(("header read", _header_read_line(how)))
    for i, proj in enumerate(page["projectors"]):
        takes = ", ".join(proj["modalities"] or []) or "-"
        catalog.append(("projectors" if i == 0 else "",
                        f"{proj['path']} (id {proj['id']}, {file_size(proj['file_size'])}, {takes})"))  # fmt: skip
    if page["facts"] is None:
        out = [title, *label_lines(catalog)]
    else:
        facts = facts_from_json(page["facts"], quant_mix=page["quant_mix"], chat_template=page.get("chat_template"),
                                chat_templates=page.get("chat_templates"))  # fmt: skip
        # The KV cache at the tokens `memory` was sized at: the context asked for, or the
        # model's own when that is shorter. One question, one answer.
        kv_at = memory["tokens"] if context is not None and memory is not None else context
        out = [facts_text(facts, [], title=title, template_findings=page["chat_template_findings"], context=kv_at,
                          template_capabilities=page["chat_template_capabilities"], more=catalog).rstrip("\n")]  # fmt: skip
    if page["shards"]:
        rows = [(s["path"], f"{s['size']:,}" if s["size"] is not None else "-", s["sha256"] or "-")
                for s in page["shards"]]  # fmt: skip
        out += ["", "files", *table(("path", "bytes", "sha256"), rows, {1})]
        out += [terminal_text(f"  {s['url']}") for s in page["shards"] if s["url"]]
    return "\n".join(out)


def _memory_lines(memory: dict[str, Any], estimate: dict[str, Any] | None) -> list[tuple[str, str]]:
    """What it needs to run: the estimate's parts on a CPU and its split with a GPU, or for a
    row an older release wrote, the file and its KV cache."""
    at = f"at {memory['tokens']:,} tokens"
    if estimate is None:
        return [("memory", f"{file_size(memory['bytes'])} {at} (the file and its f16 KV cache; the next crawl or "
                           "index sizes it as llama.cpp does)")]  # fmt: skip
    cpu, gpu = estimate["cpu"], estimate["gpu"]
    s = cpu["settings"]
    how = f"{s['cache_type']} cache, {'flash attention' if s['flash_attention'] else 'no flash attention'}, " \
          f"batch {s['ubatch']}"  # fmt: skip
    from registry.responses.memory import PART_LABELS

    parts = ", ".join(f"{PART_LABELS.get(name, name)} {file_size(n)}" for name, n in cpu["parts"].items() if n)
    return [
        ("memory", f"{file_size(cpu['total'])} {at} with llama.cpp on a CPU ({how})"),
        ("", parts),
        ("", f"every layer on a GPU: {file_size(gpu['device'])} on the device, {file_size(gpu['host'])} in host "
             "memory"),
    ]  # fmt: skip


def _header_read_line(how: dict[str, Any]) -> str:
    if how["mode"] == "sibling":
        line = terminal_text(f"from sibling {how['leader']}, {how['samples']} ranges sampled")
    else:
        line = "in full"
    confirmed = how["confirmed"]
    if confirmed is not None:
        line += "; confirmed by a verification" if confirmed else "; a verification found other facts"
    return line


def _verification_line(v: dict[str, Any]) -> str:
    when = (v["finished_at"] or v["started_at"] or v["queued_at"] or "")[:16].replace("T", " ")
    parts = [v["status"]] + ([when] if when else [])
    if v["tensors_checked"]:
        parts.append(f"{v['tensors_checked']:,} tensors")
    if v["perplexity"] is not None:
        parts.append(f"perplexity {v['perplexity']:.2f}")
    if v["reason"]:
        parts.append(str(v["reason"]))
    return ", ".join(parts) + f" (verification {v['id']})"


def _repo_text(page: dict[str, Any]) -> str:
    """A repo page for people: its facts, its direct lineage and its artifacts' table."""
    from registry.gguf.summary import label_lines, table

    r = page["repo"]
    title = terminal_text(r["repo_id"]) + (f"  ({r['source']}, revision {r['revision']})" if r["revision"] else f"  ({r['source']})")
    when = f"; modified {r['last_modified'][:10]}" if r["last_modified"] else ""
    lines = [("popularity", f"{r['downloads']:,} downloads, {r['likes']:,} likes{when}")]
    if r["gated"]:
        lines.append(("gated", str(r["gated"])))
    lines.append(("card license", r["card_license"] or ""))
    relation = f" ({r['card_base_model_relation']})" if r["card_base_model_relation"] else ""
    lines.append(("card base model", ", ".join(r["card_base_model"]) + relation if r["card_base_model"] else ""))
    lines.append(("tags", ", ".join(r["tags"])))
    lines.append(("moved from", ", ".join(page["moved_from"])))
    for label, side, key in (("made from", "parents", "parent"), ("made from it", "children", "child")):
        edges = page["lineage"][side]
        for i, e in enumerate(edges[:MAX_EDGES_SHOWN]):
            lines.append((label if i == 0 else "", f"{e[key]} ({e['relation']}, from {e['source']})"))
        if len(edges) > MAX_EDGES_SHOWN:
            lines.append(("", f"and {len(edges) - MAX_EDGES_SHOWN} more: `registry tree {r['repo_id']}`"))
    shown, count = len(page["artifacts"]), page["artifact_count"]
    head = f"artifacts ({count:,})" if shown == count else (
        f"artifacts (the first {shown:,} of {count:,} by path; all: `registry search --repo {r['repo_id']} --sort name`)")
    rows = [(str(a["id"]), a["path"], a["file_type"] or "-", a["size_label"] or "-", file_size(a["file_size"]),
             memory_text(a["memory"]), str(a["shard_count"] or "-"), a["verification_status"] or "-",
             a["status"] if not a["error"] else f"{a['status']}: {a['error']['code']}") for a in page["artifacts"]]  # fmt: skip
    cells = table(("ID", "PATH", "TYPE", "LABEL", "FILESIZE", "MEMORY", "SHARDS", "VERIFIED", "STATUS"), rows)
    return "\n".join([title, *label_lines(lines), "", terminal_text(head), *(cells if rows else ["  none"])])


# How many of a repo's parents and children `registry show REPO` lists.
MAX_EDGES_SHOWN = 10
