"""Produce the llama.cpp reference values the runner tests compare against.

Runs under the separate reference venv, never under the project's own:

    .cache/refvenv/bin/python tests/runner/make_reference.py [--speed]

It writes tests/data/runner/reference_<model>.json with, per sample model: token ids
for a set of texts (llama_cpp.Llama.tokenize(text, add_bos=True, special=False), i.e.
BOS only when the vocabulary asks for it and special-token text not parsed as
control tokens), whole-text perplexity computed here from llama.cpp's logits, the first
greedy tokens of a few prompts, and (with --speed) llama.cpp's decode speed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import llama_cpp
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / ".cache" / "models"
OUT = ROOT / "tests" / "data" / "runner"

SAMPLES = {
    "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3": "gemma-3-270m-q4_k_m.gguf",
}

# Kept identical to registry.runner.smoke.SMOKE_TEXT (a test checks it).
SMOKE_TEXT = (
    "The library opens at nine in the morning and closes at six in the evening. "
    "Visitors may borrow up to five books at a time for a period of three weeks. "
    "Children under twelve must be accompanied by an adult. "
    "Please return all books to the front desk before the due date. "
    "If a book is returned late, a small fee is charged for each day it is overdue. "
    "The reading room on the second floor is reserved for quiet study, and mobile phones "
    "should be switched off there. Computers are available near the entrance, and staff "
    "are always happy to help visitors find what they are looking for."
)

TOKENIZE_TEXTS = {
    "english": "Hello world! The quick brown fox jumps over the lazy dog.",
    "contractions": "I'm sure they'll say it's fine, but we'd rather you didn't.",
    "code": "def add(a, b):\n    return a + b\n\nprint(add(2, 3))  # -> 5\n\tif x != None:\n",
    "numbers": "In 2024, 1234567 people paid $3.14 each; 0.001% of 98765 is 9.8765.",
    "accents": "Café, naïve, façade, Ångström, São Paulo, Zürich, déjà vu, crème brûlée.",
    "emoji": "Good morning 🌞🙂! Let's go 🚀🚀 🎉 👩‍💻",
    "cjk": "你好，世界。日本語のテキスト。한국어 문장입니다.",
    "whitespace": "  leading spaces,\ttabs\t\tand\n\n\nnewlines   trailing   ",
    "special_text": "<start_of_turn>user\nHi<end_of_turn> <|im_start|>assistant<|im_end|>",
    "mixed": "Größe: 42°C — “quotes” and ‘single’ … ellipsis; ©2023 ™ ∑x² ≤ 10.",
    "empty_ish": " ",
    "multilingual": "Привет, как дела? مرحبا بالعالم. नमस्ते दुनिया। Γειά σου κόσμε. Ça va? ½ ⅔ Ⅻ ٣",
    "markup": "See https://example.com/a_b?q=1&r=two#x or <b>bold</b>, <table><tr><td>1</td></tr></table>",
    "control_text": "<bos>text<eos><pad> <|endoftext|> [multimodal]",
    "newlines": "a\n\nb\r\n c  \n\n\n\n  d    e\u3000f\u00a0g",
}

# Texts also tokenized with special=True (control tokens in the text parsed as such).
SPECIAL_TEXTS = ("special_text", "control_text")

# Long enough (100-200 tokens) that the per-token noise of quantized arithmetic, which
# differs between any two implementations, averages out of the perplexity.
PPL_TEXTS = {
    "smoke": SMOKE_TEXT,
    "story": (
        "Once upon a time, there was a little girl who lived in a village near the forest. "
        "Whenever she went out, the little girl wore a red riding cloak, so everyone in the "
        "village called her Little Red Riding Hood. One morning, her mother asked her to take "
        "a basket of bread and butter to her grandmother, who was ill and lived on the other "
        "side of the forest. Little Red Riding Hood promised to stay on the path and not to talk "
        "to strangers. But as she walked among the tall trees, she met a wolf, who asked her "
        "politely where she was going. Not knowing how dangerous he was, she told him everything."
    ),
    "science": (
        "Water boils at one hundred degrees Celsius at sea level. At higher altitudes the air "
        "pressure is lower, so water boils at a lower temperature. This is why cooking pasta "
        "in the mountains takes longer. The same principle is used in a pressure cooker, which "
        "raises the pressure inside the pot so that water boils at a higher temperature and food "
        "cooks faster. Salt also changes the boiling point of water, but only by a very small "
        "amount: a spoonful of salt in a large pot raises it by less than one degree."
    ),
    "code": (
        "def fibonacci(n):\n"
        '    """Return the n-th Fibonacci number."""\n'
        "    a, b = 0, 1\n"
        "    for _ in range(n):\n"
        "        a, b = b, a + b\n"
        "    return a\n"
        "\n"
        "\n"
        "def main():\n"
        "    for i in range(10):\n"
        "        print(i, fibonacci(i))\n"
        "\n"
        "\n"
        'if __name__ == "__main__":\n'
        "    main()\n"
    ),
}

# Pieces the random tokenizer texts are assembled from: scripts, digits, punctuation,
# whitespace runs, emoji with joiners, text that looks like special tokens.
# fmt: off
FRAGMENTS = [
    "the", "The", " quick", "don't", "I'll", "we've", "1", "42", "2024", "3.14159", "-7", "1,000",
    "é", "ñ", "Ü", "ß", "naïve", "Straße", "日本", "語", "你好", "世界", "한국어", "Привет", "مرحبا",
    "नमस्ते", "Ελλάδα", "😀", "👍🏽", "👩‍💻", "🇫🇷", "∑", "≤", "→", "©", "½", "Ⅻ", "٣",
    " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\u3000", "\u00a0",
    ".", ",", "!", "?", "'", '"', "(", ")", "[", "]", "{", "}", "<", ">", "/", "\\", "#", "$",
    "%", "&", "*", "_", "-", "=", "+", "|", "~", "`", "^", "@", ":", ";",
    "<b>", "</td>", "<start_of_turn>", "<|im_end|>", "<eos>", "<0x41>", "[multimodal]",
    "def", "return", "x_1", "camelCase", "snake_case", "URL", "http://a.b/c?d=e",
]
# fmt: on
N_RANDOM_TEXTS = 150


def random_texts(seed: int = 1234) -> list[str]:
    import random

    rng = random.Random(seed)
    return ["".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 12))) for _ in range(N_RANDOM_TEXTS)]


GREEDY_PROMPTS = {
    "capital": "The capital of France is",
    "count": "One, two, three, four,",
    "recipe": "To make a cup of tea, you first",
}
N_GREEDY = 8


def perplexity(llm: llama_cpp.Llama, tokens: list[int]) -> tuple[float, float]:
    """exp(mean NLL) of every token after the first, given all tokens before it."""
    llm.reset()
    llm.eval(tokens)
    logits = np.asarray(llm.scores[: len(tokens)], dtype=np.float64)
    nll = 0.0
    for i in range(len(tokens) - 1):
        row = logits[i]
        m = row.max()
        lse = m + math.log(np.exp(row - m).sum())
        nll += lse - row[tokens[i + 1]]
    mean = nll / (len(tokens) - 1)
    return math.exp(mean), mean


def top_logits(llm: llama_cpp.Llama, tokens: list[int], k: int = 10) -> dict[str, list[float] | list[int]]:
    """The k largest logits after the prompt, for comparing raw numbers, not just argmax."""
    llm.reset()
    llm.eval(tokens)
    row = np.asarray(llm.scores[len(tokens) - 1], dtype=np.float32)
    ids = np.argsort(-row)[:k]
    return {"ids": [int(i) for i in ids], "logits": [float(row[i]) for i in ids]}


def greedy(llm: llama_cpp.Llama, tokens: list[int], n: int) -> list[int]:
    llm.reset()
    llm.eval(tokens)
    out: list[int] = []
    for _ in range(n):
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        out.append(tok)
        llm.eval([tok])
    return out


def decode_speed(path: Path, n_threads: int, n_tokens: int = 32) -> float:
    llm = llama_cpp.Llama(str(path), n_ctx=256, n_threads=n_threads, n_threads_batch=n_threads, verbose=False)
    prompt = llm.tokenize(b"The capital of France is", add_bos=True, special=False)
    llm.eval(prompt)
    tok = prompt[-1]
    t0 = time.perf_counter()
    for _ in range(n_tokens):
        llm.eval([tok])
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    return n_tokens / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--speed", action="store_true", help="also measure llama.cpp decode tokens/s")
    ap.add_argument("--models", nargs="*", default=list(SAMPLES))
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    for name in args.models:
        path = MODELS / SAMPLES[name]
        llm = llama_cpp.Llama(
            str(path), n_ctx=1024, n_batch=1024, n_ubatch=1024, logits_all=True, n_threads=2, verbose=False
        )
        tok = {k: llm.tokenize(v.encode(), add_bos=True, special=False) for k, v in TOKENIZE_TEXTS.items()}
        ppl = {}
        for k, v in PPL_TEXTS.items():
            ids = llm.tokenize(v.encode(), add_bos=True, special=False)
            p, mean_nll = perplexity(llm, ids)
            ppl[k] = {"text": v, "tokens": ids, "perplexity": p, "mean_nll": mean_nll}
        gen = {}
        for k, v in GREEDY_PROMPTS.items():
            ids = llm.tokenize(v.encode(), add_bos=True, special=False)
            gen[k] = {
                "prompt": v,
                "prompt_tokens": ids,
                "greedy": greedy(llm, ids, N_GREEDY),
                "top_logits": top_logits(llm, ids),
            }
        data = {
            "model": SAMPLES[name],
            "llama_cpp_python": llama_cpp.__version__,
            "command": ".cache/refvenv/bin/python tests/runner/make_reference.py"
            + (" --speed" if args.speed else ""),
            "tokenize_mode": "Llama.tokenize(text.encode(), add_bos=True, special=False)",
            "tokenize": {k: {"text": TOKENIZE_TEXTS[k], "ids": v} for k, v in tok.items()},
            "tokenize_special": {
                k: {
                    "text": TOKENIZE_TEXTS[k],
                    "ids": llm.tokenize(TOKENIZE_TEXTS[k].encode(), add_bos=True, special=True),
                }
                for k in SPECIAL_TEXTS
            },
            "tokenize_random": [
                {"text": t, "ids": llm.tokenize(t.encode(), add_bos=True, special=False)}
                for t in random_texts()
            ],
            "perplexity": ppl,
            "greedy": gen,
        }
        del llm
        if args.speed:
            data["decode_tokens_per_s"] = {str(t): decode_speed(path, t) for t in (1, 2)}
        (OUT / f"reference_{name}.json").write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
        print(
            name,
            {k: round(v["perplexity"], 3) for k, v in ppl.items()},
            data.get("decode_tokens_per_s"),
            file=sys.stderr,
        )


if __name__ == "__main__":
    main()
