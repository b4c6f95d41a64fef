"""Pre-tokenizer regexes of byte-level BPE vocabularies, runnable with Python's `re`.

llama.cpp picks a list of regexes by `tokenizer.ggml.pre`; each regex splits every piece
the previous one produced, and text between matches stays a piece of its own. The
regexes use Unicode properties (`\\p{L}`, `\\p{N}`, ...) that `re` lacks, so they are
translated here into explicit character classes built from `unicodedata`. `\\s` is
translated too: `re` treats a few control characters (U+001C..U+001F) as whitespace
where the Unicode White_Space property, which llama.cpp uses, does not.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from functools import cache

from registry.runner.errors import TokenizerUnsupported

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3 = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2 = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# `tokenizer.ggml.pre` -> regexes applied in order (the families llama.cpp groups together).
PRE_REGEXES: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("gpt-2", "gpt2", "mpt", "olmo", "jais", "trillion", "granite-docling"), (_GPT2,)),
    **dict.fromkeys(
        ("starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"),
        (r"\p{N}", _GPT2),
    ),
    **dict.fromkeys(("llama3", "llama-bpe", "falcon3", "pixtral", "dbrx", "smaug-bpe"), (_LLAMA3,)),
    **dict.fromkeys(("qwen2", "stablelm2", "hunyuan", "deepseek-r1-qwen"), (_QWEN2,)),
}

# Pre-tokenizers whose words are looked up whole before any merge (llama 3's tokenizer
# was trained that way: a word in the vocabulary is one token even without a merge path).
IGNORE_MERGES = frozenset({"llama3", "llama-bpe", "falcon3", "pixtral"})

# Unicode White_Space (what llama.cpp's `\s` means).
_WHITESPACE = "\t\n\v\f\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"

_PROPERTY = re.compile(r"\\p\{(\w+)\}|\\s|\\S|\[|\]|\\.", re.DOTALL)


@cache
def _category_ranges(prefix: str) -> str:
    """Character-class body (no brackets) for every code point whose category starts with `prefix`."""
    parts: list[str] = []
    start = -1
    for cp in range(sys.maxunicode + 2):
        inside = cp <= sys.maxunicode and unicodedata.category(chr(cp)).startswith(prefix)
        if inside and start < 0:
            start = cp
        elif not inside and start >= 0:
            end = cp - 1
            parts.append(_esc(start) if start == end else f"{_esc(start)}-{_esc(end)}")
            start = -1
    return "".join(parts)


def _esc(cp: int) -> str:
    return f"\\U{cp:08x}"


def translate(pattern: str) -> re.Pattern[str]:
    """Compile a regex using `\\p{..}` and Unicode `\\s` into a Python `re` pattern."""
    out: list[str] = []
    in_class = False
    pos = 0
    for m in _PROPERTY.finditer(pattern):
        out.append(pattern[pos : m.start()])
        pos = m.end()
        tok = m.group(0)
        if m.group(1):
            body = _category_ranges(m.group(1))
            out.append(body if in_class else f"[{body}]")
        elif tok == r"\s":
            out.append(_WHITESPACE if in_class else f"[{_WHITESPACE}]")
        elif tok == r"\S":
            if in_class:
                raise TokenizerUnsupported(r"\S inside a character class is not supported")
            out.append(f"[^{_WHITESPACE}]")
        else:
            if tok == "[":
                in_class = True
            elif tok == "]":
                in_class = False
            out.append(tok)
    out.append(pattern[pos:])
    return re.compile("".join(out))


@cache
def compiled(pre: str) -> tuple[re.Pattern[str], ...]:
    regexes = PRE_REGEXES.get(pre)
    if regexes is None:
        raise TokenizerUnsupported(f"pre-tokenizer {pre!r} is not supported")
    return tuple(translate(r) for r in regexes)


def split(text: str, patterns: tuple[re.Pattern[str], ...]) -> list[str]:
    """Split `text` into words: each pattern splits every piece; unmatched text is kept."""
    pieces = [text]
    for pat in patterns:
        nxt: list[str] = []
        for piece in pieces:
            last = 0
            for m in pat.finditer(piece):
                if m.start() > last:
                    nxt.append(piece[last : m.start()])
                if m.end() > m.start():
                    nxt.append(m.group(0))
                last = m.end()
            if last < len(piece):
                nxt.append(piece[last:])
        pieces = nxt
    return pieces
