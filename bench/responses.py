"""A page of search hits, built and encoded: the response models (`ArtifactSummary.from_row`
and msgspec) side by side with the peers they replaced, in one process.

    python -m bench.responses                  # pages of 100 hits, 2,000 rounds
    python -m bench.responses --hits 20 --rounds 5000

The rows are tuples whose items read by column name, as the catalog's read path hands them
out (`row.path`). The peers build the same JSON from the same rows as the API did before the
models: a dict literal per hit from the row by position, encoded by orjson (when installed) or
by the standard library's json. Each line says how long a page takes and its ratio to the
models' time; every encoding of a page is checked equal to the models' first.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from operator import itemgetter
from typing import Any

from registry.responses import ArtifactPage, ArtifactSummary, Memory, encode
from registry.responses.artifacts import mask_names, severity_name

COLUMNS = (
    "id", "repo_id", "path", "revision", "status", "error_code", "error_message", "architecture",
    "parameter_count", "file_type", "size_label", "license", "context_length", "expert_count", "shard_count",
    "file_size", "downloads", "likes", "last_modified", "verification_status", "chat_template_max_severity",
    "kv_bytes_per_token", "kv_swa_bytes_per_token", "kv_sliding_window", "chat_template_capabilities", "kind",
    "modalities", "sort_value",
)  # fmt: skip
Row = type("Row", (tuple,), {name: property(itemgetter(i)) for i, name in enumerate(COLUMNS)} | {"__slots__": ()})


def rows(n: int, seed: int = 7) -> list[Any]:
    r = random.Random(seed)
    out = []
    for i in range(n):
        file_size = r.randrange(10**8, 5 * 10**10)
        values = (
            i + 1, f"org{r.randrange(500)}/model-{r.randrange(10**5)}-GGUF", f"model-Q{r.randrange(2, 9)}_K_M.gguf",
            "0123456789abcdef" * 2 + "01234567", "indexed", None, None, r.choice(["llama", "qwen2", "gemma3"]),
            r.randrange(10**8, 7 * 10**10), "Q4_K_M", "7B", "apache-2.0", r.choice([4096, 8192, 32768, 131072]),
            None, 1, file_size, r.randrange(10**6), r.randrange(10**3), datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC),
            r.choice([None, "passed"]), r.choice([None, 2]), r.choice([None, 131072]), 0, None, r.randrange(32),
            "model", None, file_size,
        )  # fmt: skip
        out.append(Row(values))
    return out


def memory_of(row: Any) -> Memory | None:
    per_token = row.kv_bytes_per_token
    return None if per_token is None else Memory(tokens=4096, bytes=row.file_size + 4096 * per_token)


def models_page(page: Sequence[Any]) -> bytes:
    hits = [ArtifactSummary.from_row(row, repo=row.repo_id, memory=memory_of(row)) for row in page]
    return encode(ArtifactPage(items=hits, next=None, limit=len(page)))


def _dict_hit(r: Any) -> dict[str, Any]:
    # The shape the API built before the models, from the row by position.
    memory = None if r[21] is None else {"tokens": 4096, "bytes": r[15] + 4096 * r[21]}
    capabilities = mask_names(r[24], _CAPS)
    modalities = mask_names(r[26], _MODS)
    return {
        "id": r[0], "repo": r[1], "path": r[2], "revision": r[3], "status": r[4],
        "error": {"code": r[5], "message": r[6]} if r[4] == "error" else None,
        "architecture": r[7], "parameter_count": r[8], "file_type": r[9], "size_label": r[10], "license": r[11],
        "context_length": r[12], "expert_count": r[13], "shard_count": r[14], "file_size": r[15],
        "downloads": r[16], "likes": r[17], "last_modified": r[18].isoformat().replace("+00:00", "Z"),
        "verification_status": r[19], "chat_template_severity": severity_name(r[20]),
        "chat_template_capabilities": None if capabilities is None else list(capabilities), "kind": r[25],
        "modalities": None if modalities is None else list(modalities), "memory": memory, "url": f"/v1/artifacts/{r[0]}",
    }  # fmt: skip


_CAPS = [tuple(n for i, n in enumerate(("system", "tools", "tool_calls", "thinking", "parallel_tool_calls"))
               if mask >> i & 1) for mask in range(32)]  # fmt: skip
_MODS = [tuple(n for i, n in enumerate(("vision", "audio")) if mask >> i & 1) for mask in range(4)]


def json_page(page: Sequence[Any]) -> bytes:
    body = {"items": [_dict_hit(r) for r in page], "next": None, "limit": len(page)}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def orjson_page(page: Sequence[Any]) -> bytes:
    import orjson

    return orjson.dumps({"items": [_dict_hit(r) for r in page], "next": None, "limit": len(page)})


def timed(build: Callable[[Sequence[Any]], bytes], page: Sequence[Any], rounds: int) -> float:
    best = float("inf")
    for _ in range(5):  # the best of five runs: the machine is shared
        start = time.perf_counter()
        for _ in range(rounds):
            build(page)
        best = min(best, (time.perf_counter() - start) / rounds)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hits", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args(argv)
    page = rows(args.hits)
    reference = json.loads(models_page(page))
    peers: list[tuple[str, Callable[[Sequence[Any]], bytes]]] = [("models + msgspec (this tree)", models_page)]
    try:
        import orjson  # noqa: F401

        peers.append(("dict by position + orjson (before)", orjson_page))
    except ImportError:
        print("orjson is not installed: its line is left out")
    peers.append(("dict by position + json", json_page))
    for _, build in peers:
        assert json.loads(build(page)) == reference
    base = timed(models_page, page, args.rounds)
    print(f"a page of {args.hits} hits ({len(models_page(page)):,} bytes of JSON), best of 5 x {args.rounds} rounds")
    for name, build in peers:
        took = base if build is models_page else timed(build, page, args.rounds)
        print(f"{name:<38} {took * 1e6:8.1f} us a page   {took / base:5.2f}x the models' time")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
