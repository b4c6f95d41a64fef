"""CPU smoke inference over GGUF files: tokenizer, numpy forward pass, perplexity.

Typical use, with `buf` the whole file (e.g. a numpy memmap):

    mf = ModelFile.from_buffer(buf)
    model, tokenizer = load_model(mf), load_tokenizer(mf)
    result = run_smoke(model, tokenizer)
"""

from registry.runner.errors import (
    BadMetadata,
    BadTensor,
    ContextOverflow,
    MissingKey,
    MissingTensor,
    NonFiniteLogits,
    RunnerError,
    TokenizerUnsupported,
    UnsupportedArchitecture,
)
from registry.runner.model import KVCache, Transformer, load_model, supported_architectures
from registry.runner.smoke import (
    SMOKE_PROMPT,
    SMOKE_TEXT,
    SmokeResult,
    greedy_generate,
    perplexity,
    run_smoke,
)
from registry.runner.tokenizer import Tokenizer, load_tokenizer
from registry.runner.weights import ModelFile

__all__ = [
    "SMOKE_PROMPT",
    "SMOKE_TEXT",
    "BadMetadata",
    "BadTensor",
    "ContextOverflow",
    "KVCache",
    "MissingKey",
    "MissingTensor",
    "ModelFile",
    "NonFiniteLogits",
    "RunnerError",
    "SmokeResult",
    "Tokenizer",
    "TokenizerUnsupported",
    "Transformer",
    "UnsupportedArchitecture",
    "greedy_generate",
    "load_model",
    "load_tokenizer",
    "perplexity",
    "run_smoke",
    "supported_architectures",
]
