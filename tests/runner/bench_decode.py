"""Decode speed of our runner next to llama.cpp's, same prompt, same thread count.

    .venv/bin/python tests/runner/bench_decode.py [--tokens 32] [--rounds 2]

Each measurement runs in a fresh process (BLAS thread counts are fixed at import) and
the two implementations alternate, so that load from other processes hits both alike;
the best of the rounds is reported. llama.cpp runs from the reference venv
(/work/refvenv, llama-cpp-python). Not a test: `bench/` will formalise this.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REF_PYTHON = Path(os.environ.get("REGISTRY_REF_PYTHON", "/work/refvenv/bin/python"))
MODELS = {
    "smollm2": ROOT / ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3": ROOT / ".cache/models/gemma-3-270m-q4_k_m.gguf",
}
PROMPT = "The capital of France is"

OURS = """
import sys, time, numpy as np
from registry.runner import ModelFile, load_model, load_tokenizer
mf = ModelFile.from_buffer(np.memmap(sys.argv[1], mode="r"))
model, tok = load_model(mf), load_tokenizer(mf)
n = int(sys.argv[2])
cache = model.new_cache(256)
logits = model.forward(tok.encode(sys.argv[3]), cache)
t0 = time.perf_counter()
for _ in range(n):
    logits = model.forward([int(np.argmax(logits[-1]))], cache)
print(n / (time.perf_counter() - t0))
"""

LLAMA = """
import sys, time, numpy as np, llama_cpp
t = int(sys.argv[4])
llm = llama_cpp.Llama(sys.argv[1], n_ctx=256, n_threads=t, n_threads_batch=t, verbose=False)
n = int(sys.argv[2])
llm.eval(llm.tokenize(sys.argv[3].encode(), add_bos=True, special=False))
t0 = time.perf_counter()
for _ in range(n):
    llm.eval([int(np.argmax(llm.scores[llm.n_tokens - 1]))])
print(n / (time.perf_counter() - t0))
"""


def _run(python: str, code: str, path: Path, n: int, threads: int) -> float:
    env = dict(
        os.environ,
        OPENBLAS_NUM_THREADS=str(threads),
        OMP_NUM_THREADS=str(threads),
        MKL_NUM_THREADS=str(threads),
    )
    out = subprocess.run(
        [python, "-c", code, str(path), str(n), PROMPT, str(threads)],
        env=env,
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    args = ap.parse_args()
    print("model    threads  ours tok/s  llama.cpp tok/s  ratio")
    for name, path in MODELS.items():
        for threads in args.threads:
            ours, ref = 0.0, 0.0
            for _ in range(args.rounds):
                ours = max(ours, _run(sys.executable, OURS, path, args.tokens, threads))
                ref = max(ref, _run(str(REF_PYTHON), LLAMA, path, args.tokens, threads))
            print(f"{name:8} {threads:7}  {ours:10.1f}  {ref:15.1f}  {ours / ref:5.2f}")


if __name__ == "__main__":
    main()
