"""Tokenizer findings: model and pre-tokenizer llama.cpp knows, special token ids and types."""

from __future__ import annotations

from registry.gguf.compat.codes import CompatFinding, finding
from registry.gguf.compat.tables import BPE_MODELS, PRE_TOKENIZERS, TOKENIZER_MODELS
from registry.gguf.model import GGUFHeader

# llama.cpp's token types (LLAMA_TOKEN_TYPE_*).
_UNKNOWN, _CONTROL, _USER_DEFINED = 2, 3, 4
# The special tokens checked, and the token types each may have: a stop or start token that
# is a normal token is printed, and a prompt that spells it is split into pieces.
_SPECIAL = {
    "bos": (_CONTROL, _USER_DEFINED),
    "eos": (_CONTROL, _USER_DEFINED),
    "eot": (_CONTROL, _USER_DEFINED),
    "pad": (_CONTROL, _USER_DEFINED, _UNKNOWN),
    "unk": (_UNKNOWN, _CONTROL, _USER_DEFINED),
    "sep": (_CONTROL, _USER_DEFINED),
}


# llama.cpp's default EOS id per tokenizer model when the file names none.
_DEFAULT_EOS = {"llama": 2, "gpt2": 11, "t5": 1, "plamo2": 2}


def tokenizer_findings(header: GGUFHeader) -> list[CompatFinding]:
    model = header.get("tokenizer.ggml.model")
    if model is None:
        return []  # no vocabulary: an embedding of another model's tokens, nothing to check
    if not isinstance(model, str) or model not in TOKENIZER_MODELS:
        return [finding("L014", "tokenizer.ggml.model", f"tokenizer model {model!r} is unknown to llama.cpp")]
    out: list[CompatFinding] = []
    pre = header.get("tokenizer.ggml.pre")
    if model in BPE_MODELS and model != "gemma4":  # gemma4 sets its own pre-tokenizer
        if pre is None:
            out.append(
                finding(
                    "L013",
                    "tokenizer.ggml.pre",
                    "BPE vocabulary without a pre-tokenizer: llama.cpp uses 'default'",
                )
            )
        elif not isinstance(pre, str) or pre not in PRE_TOKENIZERS:
            out.append(
                finding("L012", "tokenizer.ggml.pre", f"pre-tokenizer {pre!r} is unknown to llama.cpp")
            )
    out += _special_tokens(header)
    return out


def _special_tokens(header: GGUFHeader) -> list[CompatFinding]:
    tokens = header.get("tokenizer.ggml.tokens")
    if tokens is None or isinstance(tokens, str | int | float):
        return []
    n = len(tokens)
    types = header.get("tokenizer.ggml.token_type")
    types = None if types is None or isinstance(types, str | int | float) or len(types) != n else types
    out: list[CompatFinding] = []
    stops = 0
    for name, allowed in _SPECIAL.items():
        key = f"tokenizer.ggml.{name}_token_id"
        value = header.get(key)
        if value is None or isinstance(value, bool) or not isinstance(value, int):
            continue
        if value < 0 or value >= n:
            out.append(finding("L015", key, f"{name} token id {value} is outside the {n}-token vocabulary"))
            continue
        stops += name in ("eos", "eot")
        if types is not None:
            kind = int(types[value])
            if kind not in allowed:
                out.append(finding("L016", key, f"{name} token {value} has token type {kind}, not control"))
    model = header.get("tokenizer.ggml.model")
    if stops == 0 and model not in ("bert", "no_vocab", "none"):
        fallback = _DEFAULT_EOS.get(str(model))
        then = (f"llama.cpp falls back to token {fallback}, which may not end a turn" if fallback is not None
                and fallback < n else "generation does not stop on its own")  # fmt: skip
        out.append(finding("L017", "tokenizer.ggml.eos_token_id", f"no eos and no eot token id: {then}"))
    return out
