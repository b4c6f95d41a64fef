"""Load one GGUF file with llama.cpp (through llama-cpp-python) and let it log its buffers.

Runs under the reference virtualenv's interpreter, not this project's: it imports only the
standard library and llama_cpp. `bench/memory.py` starts it as a subprocess, reads the log
llama.cpp writes to stderr (model, KV cache, recurrent state, output and compute buffer
sizes) and compares it with the estimate. One JSON line on stdout says what was asked and
which llama.cpp it was.

    python bench/memory_probe.py FILE --ctx 4096 [--batch 512 --ubatch 512 --seqs 1
        --cache f16 --flash-attn 0 --swa-full 0 --no-alloc 0 --repack 1]
    python bench/memory_probe.py FILE --quantize OUT --ftype 15   # llama.cpp's own quantizer
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys

CACHE_TYPES = {"f16": 1, "q4_0": 2, "q8_0": 8}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("path")
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--quantize", metavar="OUT")
    p.add_argument("--ftype", type=int, default=15)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--ubatch", type=int, default=512)
    p.add_argument("--seqs", type=int, default=1)
    p.add_argument("--cache", choices=sorted(CACHE_TYPES), default="f16")
    p.add_argument("--flash-attn", type=int, default=0)
    p.add_argument("--swa-full", type=int, default=0)
    p.add_argument("--no-alloc", type=int, default=0)
    p.add_argument("--repack", type=int, default=1)
    a = p.parse_args()

    import llama_cpp
    from llama_cpp import _logger

    _logger.set_verbose(True)
    llama_cpp.llama_backend_init()
    if a.quantize:
        qp = llama_cpp.llama_model_quantize_default_params()
        qp.ftype, qp.nthread = a.ftype, 2
        rc = llama_cpp.llama_model_quantize(a.path.encode(), a.quantize.encode(), ctypes.byref(qp))
        print(json.dumps({"llama_cpp_python": llama_cpp.__version__, "quantized": rc == 0}), flush=True)
        return 0 if rc == 0 else 4
    mp = llama_cpp.llama_model_default_params()
    mp.no_alloc = bool(a.no_alloc)
    if a.no_alloc:  # sizes only: llama.cpp maps nothing then
        mp.load_mode = llama_cpp.LLAMA_LOAD_MODE_NONE
    mp.use_extra_bufts = bool(a.repack)
    model = llama_cpp.llama_model_load_from_file(a.path.encode(), mp)
    if not model:
        print("probe: the model did not load", file=sys.stderr)
        return 2
    cp = llama_cpp.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = a.ctx, a.batch, a.ubatch, a.seqs
    cp.type_k = cp.type_v = CACHE_TYPES[a.cache]
    cp.flash_attn_type = (
        llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if a.flash_attn else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    )
    cp.swa_full = bool(a.swa_full)
    cp.n_threads = cp.n_threads_batch = 1
    ctx = llama_cpp.llama_init_from_model(model, cp)
    sys.stderr.flush()
    info = {
        "llama_cpp_python": llama_cpp.__version__,
        "loaded": bool(ctx),
        "system": ctypes.string_at(llama_cpp.llama_print_system_info()).decode().strip(),
    }
    print(json.dumps(info), flush=True)
    if ctx:
        llama_cpp.llama_free(ctx)
    llama_cpp.llama_model_free(model)
    return 0 if ctx else 3


if __name__ == "__main__":
    sys.exit(main())
