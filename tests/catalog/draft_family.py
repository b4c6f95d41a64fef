"""A family of small GGUF files sharing SmolLM2's real tokenizer, written with gguf-py, for
the draft-model filter: some can draft for SmolLM2 in llama.cpp, some differ just enough
that they cannot.

Each copies SmolLM2's `tokenizer.ggml.*` keys and the architecture's hyperparameters (so
that llama.cpp can load its vocabulary), and holds one small F32 tensor, so its parameter
count is that tensor's element count.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import numpy as np

from tests.gguf.gguf_py import gguf_reader

# file name -> (parameters, what changes against SmolLM2, whether it can draft for SmolLM2)
MEMBERS: dict[str, tuple[int, str, bool]] = {
    "same.gguf": (64, "nothing", True),
    "padded.gguf": (64, "128 [PAD<id>] tokens appended", True),
    "overpadded.gguf": (64, "129 [PAD<id>] tokens appended: one more than llama.cpp allows", False),
    "early.gguf": (32, "token 3 renamed: llama.cpp compares from id 5", True),
    "renamed.gguf": (64, "token 100 renamed", False),
    "bos.gguf": (64, "another BOS id", False),
    "add-bos.gguf": (64, "add_bos_token true", False),
    "vocab-only.gguf": (0, "no tensors: a vocabulary file, no model", False),
}


def _pads(first: int, n: int) -> list[str]:
    return [f"[PAD{i}]" for i in range(first, first + n)]


def write_family(source: Path, folder: Path) -> dict[str, Path]:
    """Write every member of MEMBERS into `folder`; returns name -> path."""
    reader = gguf_reader(source)
    base: dict[str, tuple[Any, list[gguf.GGUFValueType]]] = {}
    arch = str(reader.fields["general.architecture"].contents())
    for key, f in reader.fields.items():
        if key.startswith("tokenizer.ggml.") or (key.startswith(f"{arch}.")):
            base[key] = (f.contents(), list(f.types))
    n = len(base["tokenizer.ggml.tokens"][0])
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, (params, _, _) in MEMBERS.items():
        kv = {k: (list(v) if isinstance(v, list) else v, t) for k, (v, t) in base.items()}
        tokens, types = kv["tokenizer.ggml.tokens"][0], kv["tokenizer.ggml.token_type"][0]
        if name in ("padded.gguf", "overpadded.gguf"):
            extra = 128 if name == "padded.gguf" else 129
            tokens += _pads(n, extra)
            types += [int(gguf.TokenType.UNUSED)] * extra
        elif name == "early.gguf":
            tokens[3] = "renamed-early"
        elif name == "renamed.gguf":
            tokens[100] = "renamed-late"
        elif name == "bos.gguf":
            kv["tokenizer.ggml.bos_token_id"] = (7, kv["tokenizer.ggml.bos_token_id"][1])
        elif name == "add-bos.gguf":
            kv["tokenizer.ggml.add_bos_token"] = (True, kv["tokenizer.ggml.add_bos_token"][1])
        path = folder / name
        w = gguf.GGUFWriter(path, arch)
        w.add_name(name.removesuffix(".gguf"))
        for key, (value, vtypes) in kv.items():
            w.add_key_value(key, value, vtypes[0], sub_type=vtypes[-1] if len(vtypes) > 1 else None)
        if params:
            w.add_tensor("output_norm.weight", np.ones(params, dtype=np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        paths[name] = path
    return paths


# llama.cpp's own test, run in the peer virtualenv on every pair: vocabulary type, the BOS
# and EOS ids and add flags, the size difference and the texts from id 5 on.
LLAMA_CPP_CHECK = """
import itertools, json, sys
import llama_cpp as L
L.llama_backend_init()
vocabs = {}
for path in sys.argv[1:]:
    params = L.llama_model_default_params()
    params.vocab_only = True
    model = L.llama_model_load_from_file(path.encode(), params)
    assert model, path
    v = L.llama_model_get_vocab(model)
    n = L.llama_vocab_n_tokens(v)
    vocabs[path] = (
        (L.llama_vocab_type(v), L.llama_vocab_get_add_bos(v), L.llama_vocab_get_add_eos(v),
         L.llama_vocab_bos(v), L.llama_vocab_eos(v)),
        [L.llama_vocab_get_text(v, i) for i in range(n)],
    )
out = []
for a, b in itertools.permutations(vocabs, 2):
    (sa, ta), (sb, tb) = vocabs[a], vocabs[b]
    ok = sa == sb and abs(len(ta) - len(tb)) <= 128 and ta[5:min(len(ta), len(tb))] == tb[5:min(len(ta), len(tb))]
    out.append([a, b, ok])
print(json.dumps(out))
"""
