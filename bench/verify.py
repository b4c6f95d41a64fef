"""Verification and CPU inference, side by side with llama.cpp (llama-cpp-python).

    python -m bench.verify [--threads N] [--tokens N] [--models smollm2,gemma3]

For each sample model, on the same file and the same number of threads:

- verify: a whole `workers.verify` run through the fake hub on loopback (download into an
  empty cache, sha256 against the LFS oid, bounds, every tensor dequantized, perplexity,
  greedy generation), wall time and the peak RSS of its check process. llama.cpp has no
  such command; its column is the time to load the model and compute the same perplexity
  and generation, which is the part of a verification it could do.
- prompt processing (tokens/s): one forward pass over the smoke paragraph's tokens.
- generation (tokens/s): `--tokens` greedy tokens one at a time after a short prompt.
- perplexity of the smoke paragraph (whole text in one context, BOS as the vocabulary
  says), and each side's peak RSS for the speed runs.
- the same speed runs with every weight matrix kept quantized (`load_model(...,
  max_weight_bytes=0)`, what a verification does for a model whose float32 weights do
  not fit under `verify.memory_cap_bytes`): tokens/s and peak RSS against llama.cpp's,
  which also reads its weights from the mapped file.

Each side's speed runs in a fresh process of its own (llama.cpp's in the peer virtualenv, `make refvenv`),
so that peak RSS is that side's alone. Targets: generation at least 0.2x llama.cpp's
tokens/s; a whole verification of the gemma file under 30 s; peak RSS under 3 GB.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.ggml_ref import peer_venv

GEN_RATIO_TARGET = 0.2
VERIFY_SECONDS_TARGET = 30.0
RSS_TARGET = 3 * 1024**3

# Run by the peer virtualenv's python: llama.cpp's side of the speed runs, JSON on stdout.
_LLAMA_SCRIPT = r"""
import json, math, resource, sys, time
import numpy as np
import llama_cpp

path, n_threads, n_tokens, text, prompt = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
t0 = time.perf_counter()
llm = llama_cpp.Llama(path, n_ctx=1024, n_batch=1024, n_ubatch=1024, logits_all=True,
                      n_threads=n_threads, n_threads_batch=n_threads, verbose=False)
load = time.perf_counter() - t0
ids = llm.tokenize(text.encode(), add_bos=True, special=False)
t1 = time.perf_counter()
llm.eval(ids)
pp = len(ids) / (time.perf_counter() - t1)
logits = np.asarray(llm.scores[: len(ids)], dtype=np.float64)
m = logits.max(axis=1, keepdims=True)
logp = logits - m - np.log(np.exp(logits - m).sum(axis=1, keepdims=True))
nll = -np.mean([logp[i, ids[i + 1]] for i in range(len(ids) - 1)])
t2 = time.perf_counter()
llm.reset()
p_ids = llm.tokenize(prompt.encode(), add_bos=True, special=False)
llm.eval(p_ids)
tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
t3 = time.perf_counter()
for _ in range(n_tokens):
    llm.eval([tok])
    tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
tg = n_tokens / (time.perf_counter() - t3)
smoke = time.perf_counter() - t0  # load, perplexity, prompt and generation
print(json.dumps({"pp": pp, "tg": tg, "perplexity": math.exp(nll), "tokens": len(ids), "load": load,
                  "smoke_seconds": smoke, "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def _ours_speed(path: str, n_tokens: int, *, kept: bool = False) -> dict[str, Any]:
    """Our side of the speed runs (in a fresh process: see main); `kept`: every weight
    matrix kept quantized."""
    import math
    import resource

    import numpy as np

    from registry.runner import SMOKE_PROMPT, SMOKE_TEXT, load_model, load_tokenizer
    from registry.runner.smoke import mean_nll
    from workers.verify_checks import open_model_file

    t0 = time.perf_counter()
    mf = open_model_file(path)
    model, tok = load_model(mf, max_weight_bytes=0 if kept else None), load_tokenizer(mf)
    load = time.perf_counter() - t0
    ids = tok.encode(SMOKE_TEXT)
    t1 = time.perf_counter()
    model.forward(ids, model.new_cache(len(ids)))
    pp = len(ids) / (time.perf_counter() - t1)
    ppl = math.exp(mean_nll(model, ids))
    prompt = tok.encode(SMOKE_PROMPT)
    cache = model.new_cache(len(prompt) + n_tokens + 1)
    nxt = int(np.argmax(model.forward(prompt, cache)[-1]))
    t2 = time.perf_counter()
    for _ in range(n_tokens):
        nxt = int(np.argmax(model.forward([nxt], cache)[-1]))
    tg = n_tokens / (time.perf_counter() - t2)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"pp": pp, "tg": tg, "perplexity": ppl, "tokens": len(ids), "load": load, "rss": rss,
            "kept_matrices": model.kept_matrices}  # fmt: skip


def _child_json(cmd: list[str], env: dict[str, str]) -> dict[str, Any]:
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if out.returncode != 0:
        how = f"signal {-out.returncode}" if out.returncode < 0 else f"exit status {out.returncode}"
        tail = out.stderr.strip().splitlines()[-3:]
        raise RuntimeError(f"{cmd[0]} failed with {how}: {tail}")
    data: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return data


async def _verify_through_hub(path: Path, sha256: str) -> tuple[float, dict[str, Any]]:
    from registry.config import HubSettings, Settings, VerifySettings
    from tests.fakehub import FakeHub
    from tests.fakehub.corpus import Corpus, LocalBlob, Repo, RepoFile
    from tests.fakehub.testing import TOKEN
    from workers.verify import verify_hub

    with tempfile.TemporaryDirectory() as tmp:
        corpus = Corpus([Repo("bench/model-GGUF", [RepoFile(path.name, LocalBlob(path, sha256))])])
        async with FakeHub(corpus, tokens={TOKEN}) as hub:
            settings = dataclasses.replace(
                Settings(),
                hub=HubSettings(endpoint=hub.endpoint, token=TOKEN),
                verify=VerifySettings(cache_dir=str(Path(tmp) / "cache")),
            )
            t0 = time.perf_counter()
            result = await verify_hub("bench/model-GGUF", path.name, settings)
            return time.perf_counter() - t0, result.to_dict(tensors=False)


def _fmt_rate(x: float) -> str:
    return f"{x:9.1f}"


def _row(label: str, ours: str, ref: str, ratio: str = "") -> str:
    return f"  {label:<28} {ours:>14} {ref:>14} {ratio:>8}"


def bench_model(name: str, path: Path, sha256: str, threads: int, n_tokens: int) -> list[tuple[str, bool]]:
    from registry.runner import SMOKE_PROMPT, SMOKE_TEXT

    env = {**os.environ, "OPENBLAS_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}
    verify_s, v = asyncio.run(_verify_through_hub(path, sha256))
    ours = _child_json([sys.executable, "-m", "bench.verify", "--ours-speed", str(path), str(n_tokens)], env)
    kept = _child_json(
        [sys.executable, "-m", "bench.verify", "--ours-speed", str(path), str(n_tokens), "kept"], env
    )
    ref = _child_json(
        [
            str(peer_venv() / "bin" / "python"),
            "-c",
            _LLAMA_SCRIPT,
            str(path),
            str(threads),
            str(n_tokens),
            SMOKE_TEXT,
            SMOKE_PROMPT,
        ],
        env,
    )
    gen_ratio = ours["tg"] / ref["tg"]
    print(f"\n{name}: {path.name} ({path.stat().st_size / 1e6:.0f} MB), {threads} threads")
    print(_row("", "ours", "llama.cpp", "ratio"))
    print(_row("generation tokens/s", _fmt_rate(ours["tg"]), _fmt_rate(ref["tg"]), f"{gen_ratio:.2f}x"))
    print(
        _row(
            "prompt processing tokens/s",
            _fmt_rate(ours["pp"]),
            _fmt_rate(ref["pp"]),
            f"{ours['pp'] / ref['pp']:.2f}x",
        )
    )
    print(_row("perplexity (smoke text)", f"{ours['perplexity']:.3f}", f"{ref['perplexity']:.3f}"))
    print(_row("verification (s)", f"{verify_s:.2f}", f"{ref['smoke_seconds']:.2f}"))
    print(_row("  of which download+hash (s)", f"{v['timings']['download'] + v['timings']['hash']:.2f}", "-"))
    print(_row("peak RSS, verify child (MB)", f"{(v['peak_rss_bytes'] or 0) / 1e6:.0f}", "-"))
    print(_row("peak RSS, speed run (MB)", f"{ours['rss'] / 1e6:.0f}", f"{ref['rss'] / 1e6:.0f}"))
    print(f"  weights kept quantized ({kept['kept_matrices']} matrices dequantized at each use):")
    print(
        _row(
            "  generation tokens/s",
            _fmt_rate(kept["tg"]),
            _fmt_rate(ref["tg"]),
            f"{kept['tg'] / ref['tg']:.2f}x",
        )
    )
    print(_row("  prompt processing tokens/s", _fmt_rate(kept["pp"]), _fmt_rate(ref["pp"]),
               f"{kept['pp'] / ref['pp']:.2f}x"))  # fmt: skip
    print(_row("  perplexity (smoke text)", f"{kept['perplexity']:.3f}", f"{ref['perplexity']:.3f}"))
    print(_row("  peak RSS, speed run (MB)", f"{kept['rss'] / 1e6:.0f}", f"{ref['rss'] / 1e6:.0f}",
               f"{kept['rss'] / ref['rss']:.2f}x"))  # fmt: skip
    print(f"  verification: {v['status']} {v['reason'] or ''} ({v['bytes_downloaded']} bytes downloaded)")
    peak = max(ours["rss"], v["peak_rss_bytes"] or 0)
    checks = [
        (
            f"{name}: generation >= {GEN_RATIO_TARGET}x llama.cpp ({gen_ratio:.2f}x)",
            gen_ratio >= GEN_RATIO_TARGET,
        ),
        (f"{name}: peak RSS < 3 GB ({peak / 1e9:.2f} GB)", peak < RSS_TARGET),
        (f"{name}: verification passed", v["status"] == "passed"),
    ]
    if name == "gemma3":
        checks.append(
            (f"gemma3: whole verification < {VERIFY_SECONDS_TARGET:.0f} s ({verify_s:.1f} s)", verify_s < 30)
        )
    return checks


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--ours-speed"]:
        print(json.dumps(_ours_speed(argv[1], int(argv[2]), kept=argv[3:] == ["kept"])))
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench.verify", description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--tokens", type=int, default=32, help="greedy tokens timed for generation")
    parser.add_argument("--models", default="smollm2,gemma3")
    args = parser.parse_args(argv)

    from tests.models import GEMMA3, SMOLLM2, sha256_file, unavailable_reason

    checks: list[tuple[str, bool]] = []
    for name, model in (("smollm2", SMOLLM2), ("gemma3", GEMMA3)):
        if name not in args.models.split(","):
            continue
        reason = unavailable_reason(model)
        if reason is not None:
            print(f"{name}: skipped: {reason}")
            continue
        sha = model.sha256 or sha256_file(model.path)
        checks += bench_model(name, model.path, sha, args.threads, args.tokens)
    print("\ntargets:")
    for text, ok in checks:
        print(f"  {'met   ' if ok else 'MISSED'} {text}")
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
