"""What llama.cpp knows, as tables written from reading its source.

The tables follow llama.cpp's `src/llama-arch.cpp` (LLM_ARCH_NAMES, commit 00395eb2),
`src/llama-vocab.cpp` (tokenizer models and pre-tokenizers, commit 00ad355e) and the
`create_tensor` calls of `src/llama-model.cpp` that are not marked optional.
`docs/compatibility.md` names the same commits; update both together.

Tensor requirements are per layer unless global: a layer group is satisfied when one of its
alternatives is present whole (a dense or a mixture-of-experts feed-forward, split or fused
QKV, an attention or a recurrent layer in hybrid models). Only tensors llama.cpp requires for
every file of the architecture are listed, so a miss is a refusal, not a guess.
"""

from __future__ import annotations

from dataclasses import dataclass

ARCHITECTURES = frozenset(
    [
        "clip",
        "llama",
        "llama4",
        "deci",
        "falcon",
        "grok",
        "gpt2",
        "gptj",
        "gptneox",
        "mpt",
        "baichuan",
        "starcoder",
        "refact",
        "bert",
        "modern-bert",
        "nomic-bert",
        "nomic-bert-moe",
        "neo-bert",
        "jina-bert-v2",
        "jina-bert-v3",
        "eurobert",
        "bloom",
        "stablelm",
        "qwen",
        "qwen2",
        "qwen2moe",
        "qwen2vl",
        "qwen3",
        "qwen3moe",
        "qwen3next",
        "qwen3vl",
        "qwen3vlmoe",
        "qwen35",
        "qwen35moe",
        "phi2",
        "phi3",
        "phimoe",
        "plamo",
        "plamo2",
        "plamo3",
        "codeshell",
        "orion",
        "internlm2",
        "minicpm",
        "minicpm3",
        "gemma",
        "gemma2",
        "gemma3",
        "gemma3n",
        "gemma4",
        "gemma4-assistant",
        "gemma-embedding",
        "starcoder2",
        "mamba",
        "mamba2",
        "jamba",
        "falcon-h1",
        "xverse",
        "command-r",
        "cohere2",
        "cohere2moe",
        "dbrx",
        "olmo",
        "olmo2",
        "olmoe",
        "openelm",
        "arctic",
        "deepseek",
        "deepseek2",
        "deepseek2-ocr",
        "deepseek32",
        "deepseek4",
        "chatglm",
        "glm4",
        "glm4moe",
        "glm-dsa",
        "bitnet",
        "t5",
        "t5encoder",
        "jais",
        "jais2",
        "nemotron",
        "nemotron_h",
        "nemotron_h_moe",
        "exaone",
        "exaone4",
        "exaone-moe",
        "rwkv6",
        "rwkv6qwen2",
        "rwkv7",
        "arwkv7",
        "granite",
        "granitemoe",
        "granitehybrid",
        "chameleon",
        "wavtokenizer-dec",
        "plm",
        "bailingmoe",
        "bailingmoe2",
        "dots1",
        "arcee",
        "afmoe",
        "laguna",
        "ernie4_5",
        "ernie4_5-moe",
        "hunyuan-moe",
        "hunyuan-dense",
        "hunyuan_vl",
        "hy_v3",
        "smollm3",
        "gpt-oss",
        "lfm2",
        "lfm2moe",
        "dream",
        "smallthinker",
        "llada",
        "llada-moe",
        "seed_oss",
        "grovemoe",
        "apertus",
        "minimax-m2",
        "cogvlm",
        "rnd1",
        "pangu-embedded",
        "mistral3",
        "eagle3",
        "dflash",
        "mistral4",
        "paddleocr",
        "mimo2",
        "step35",
        "llama-embed",
        "maincoder",
        "kimi-linear",
        "talkie",
        "mellum",
    ]
)

# Files of these types load as something other than a language model (a vision projector).
NOT_A_MODEL = frozenset({"clip"})

TOKENIZER_MODELS = frozenset(
    {"no_vocab", "none", "llama", "bert", "gpt2", "hybriddna", "whitespace", "t5", "rwkv", "plamo2", "gemma4"}
)
# Tokenizer models whose vocabulary is BPE and so needs a known `tokenizer.ggml.pre`.
BPE_MODELS = frozenset({"gpt2", "hybriddna", "whitespace", "gemma4"})

PRE_TOKENIZERS = frozenset(
    [
        "default",
        "minicpm5",
        "llama3",
        "llama-v3",
        "llama-bpe",
        "falcon3",
        "falcon-h1",
        "pixtral",
        "midm-2.0",
        "lfm2",
        "jina-v5-nano",
        "deepseek-llm",
        "deepseek-coder",
        "deepseek-v3",
        "spark2_5",
        "youtu",
        "falcon",
        "mpt",
        "starcoder",
        "gpt-2",
        "phi-2",
        "jina-es",
        "jina-de",
        "gigachat",
        "jina-v2-es",
        "jina-v2-de",
        "a.x-4.0",
        "mellum",
        "modern-bert",
        "jais-2",
        "gemma4",
        "granite-embed-multi-311m",
        "sarvam-moe",
        "jina-v1-en",
        "jina-v2-code",
        "roberta-bpe",
        "whitespace",
        "refact",
        "command-r",
        "qwen2",
        "deepseek-r1-qwen",
        "kormo",
        "f2llmv2",
        "qwen35",
        "stablelm2",
        "olmo",
        "dbrx",
        "smaug-bpe",
        "poro-chat",
        "glm4",
        "chatglm-bpe",
        "viking",
        "jais",
        "tekken",
        "smollm",
        "codeshell",
        "bloom",
        "gpt3-finnish",
        "exaone",
        "exaone4",
        "exaone-moe",
        "chameleon",
        "minerva-7b",
        "megrez",
        "gpt-4o",
        "llama4",
        "kanana2",
        "talkie",
        "granite-embed-multi-97m",
        "tiny_aya",
        "cohere2moe",
        "superbpe",
        "trillion",
        "granite-docling",
        "bailingmoe",
        "bailingmoe2",
        "llada-moe",
        "seed-coder",
        "hunyuan",
        "hunyuan-dense",
        "hy_v4",
        "joyai-llm",
        "kimi-k2",
        "ufakzeka",
        "grok-2",
        "afmoe",
        "laguna",
        "minimax-m2",
        "solar-open",
        "mellum2",
    ]
)

Alternative = tuple[str, ...]
Group = tuple[Alternative, ...]


@dataclass(frozen=True, slots=True)
class Required:
    globals: tuple[str, ...]
    layer: tuple[Group, ...]


_QKV: Group = (("attn_q", "attn_k", "attn_v"), ("attn_qkv",))
_SPLIT_QKV: Group = (("attn_q", "attn_k", "attn_v"),)
_OUT: Group = (("attn_output",),)
_DENSE: Alternative = ("ffn_gate", "ffn_down", "ffn_up")
_MOE: Alternative = ("ffn_gate_inp", "ffn_gate_exps", "ffn_down_exps", "ffn_up_exps")
_FFN: Group = (_DENSE, _MOE)
_ATTN_NORM: Group = (("attn_norm",),)
_FFN_NORM: Group = (("ffn_norm",),)
_QK_NORM: Group = (("attn_q_norm", "attn_k_norm"),)
_POST_NORMS: Group = (("post_attention_norm", "post_ffw_norm"),)
_LM = ("token_embd", "output_norm")

_LLAMA = Required(_LM, (_ATTN_NORM, _SPLIT_QKV, _OUT, _FFN_NORM, _FFN))
_QWEN3 = Required(_LM, (_ATTN_NORM, _SPLIT_QKV, _QK_NORM, _OUT, _FFN_NORM, _FFN))
_GEMMA2 = Required(_LM, (_ATTN_NORM, _SPLIT_QKV, _OUT, _POST_NORMS, _FFN_NORM, (_DENSE,)))
_GEMMA3 = Required(_LM, (_ATTN_NORM, _SPLIT_QKV, _QK_NORM, _OUT, _POST_NORMS, _FFN_NORM, (_DENSE,)))
_MAMBA_LAYER: Alternative = ("ssm_in", "ssm_conv1d", "ssm_out")
_ATTN_LAYER: Alternative = ("attn_q", "attn_k", "attn_v", "attn_output")
_JAMBA_SSM: Alternative = ("ssm_in", "ssm_conv1d", "ssm_x", "ssm_dt", "ssm_out")

REQUIRED: dict[str, Required] = {
    "llama": _LLAMA,
    "mistral3": _LLAMA,
    "granite": _LLAMA,
    "granitemoe": Required(_LM, (_ATTN_NORM, _SPLIT_QKV, _OUT, _FFN_NORM, (_MOE,))),
    "qwen2": Required(_LM, (_ATTN_NORM, _SPLIT_QKV, _OUT, _FFN_NORM, (_DENSE,))),
    "qwen3": Required(_LM, (_ATTN_NORM, _SPLIT_QKV, _QK_NORM, _OUT, _FFN_NORM, (_DENSE,))),
    "qwen3moe": Required(_LM, (_ATTN_NORM, _SPLIT_QKV, _QK_NORM, _OUT, _FFN_NORM, (_MOE,))),
    "gemma": Required(_LM, (_ATTN_NORM, _SPLIT_QKV, _OUT, _FFN_NORM, (_DENSE,))),
    "gemma2": _GEMMA2,
    "gemma3": _GEMMA3,
    "phi3": Required(_LM, (_ATTN_NORM, _QKV, _OUT, _FFN_NORM, (("ffn_down", "ffn_up"), _MOE))),
    "deepseek2": Required(
        _LM,
        (
            _ATTN_NORM,
            (("attn_q",), ("attn_q_a", "attn_q_a_norm", "attn_q_b")),
            (("attn_kv_a_mqa", "attn_kv_a_norm"),),
            (("attn_kv_b",), ("attn_k_b", "attn_v_b")),
            _OUT,
            _FFN_NORM,
            _FFN,
        ),
    ),
    "granitehybrid": Required(_LM, (_ATTN_NORM, (_ATTN_LAYER, _MAMBA_LAYER), _FFN_NORM, _FFN)),
    "mamba": Required(
        _LM, (_ATTN_NORM, (("ssm_in", "ssm_conv1d", "ssm_x", "ssm_dt", "ssm_a", "ssm_d", "ssm_out"),))
    ),
    "jamba": Required(_LM, (_ATTN_NORM, (_ATTN_LAYER, _JAMBA_SSM), _FFN_NORM, _FFN)),
    "bert": Required(
        ("token_embd", "token_embd_norm"),
        (_QKV, _OUT, (("attn_output_norm",),), (("ffn_up", "ffn_down"),), (("layer_output_norm",),)),
    ),
    "nomic-bert": Required(
        ("token_embd", "token_embd_norm"),
        (
            (("attn_qkv",),),
            _OUT,
            (("attn_output_norm",),),
            (("ffn_up", "ffn_down"),),
            (("layer_output_norm",),),
        ),
    ),
    "falcon": Required(_LM, (_ATTN_NORM, (("attn_qkv",),), _OUT, (("ffn_up", "ffn_down"),))),
    "starcoder2": Required(_LM, (_ATTN_NORM, _SPLIT_QKV, _OUT, _FFN_NORM, (("ffn_up", "ffn_down"),))),
    "command-r": Required(_LM, (_ATTN_NORM, _SPLIT_QKV, _OUT, (_DENSE,))),
    "olmo2": Required(_LM, (_SPLIT_QKV, _QK_NORM, _OUT, _POST_NORMS, (_DENSE,))),
}
