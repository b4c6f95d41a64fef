"""The numpy walk over string arrays (registry.gguf.strings) against plain reference walks.

Two references: `ref_walk` below, one element at a time from the format description; and
the parser with its old pure-Python walk put back, to show that headers, errors and
NeedMoreData estimates come out identical at every cut of the buffer.

Small windows and a vectorised path for any count are patched in, so that arrays of a few
dozen elements cross window edges in every way a multi-megabyte vocabulary does.
"""

from __future__ import annotations

import itertools
import random
import struct
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from registry.gguf import reader, strings
from registry.gguf.array import GGUFArray
from registry.gguf.errors import GGUFError, NeedMoreData
from registry.gguf.limits import Limits
from registry.gguf.reader import ParseProgress, parse_header
from registry.gguf.types import ValueType
from tests.gguf.builders import Arr, HeaderBuilder

FORMATS = [(4, False), (4, True), (8, False), (8, True)]  # (length width, big endian)
FORMAT_IDS = ["v1-le", "v1-be", "le", "be"]


def ref_walk(buf: bytes, start: int, count: int, lw: int, big: bool, max_len: int) -> tuple[int, int]:
    pos = start
    for i in range(count):
        if pos + lw > len(buf):
            return i, pos
        size = int.from_bytes(buf[pos : pos + lw], "big" if big else "little")
        if size > max_len or pos + lw + size > len(buf):
            return i, pos
        pos += lw + size
    return count, pos


def walk_with_starts(
    buf: bytes, start: int, count: int, lw: int, big: bool, max_len: int
) -> tuple[tuple[int, int], list[int]]:
    """walk_strings' result and the element starts it collected, as one list."""
    parts: list[Any] = []
    result = strings.walk_strings(buf, start, count, lw, big, max_len, parts)
    return result, [int(x) for part in parts for x in part]


def encode(items: list[bytes], lw: int, big: bool) -> bytes:
    order = "big" if big else "little"
    return b"".join(len(s).to_bytes(lw, order) + s for s in items)


def boundaries(items: list[bytes], start: int, lw: int) -> list[int]:
    out = [start]
    for s in items:
        out.append(out[-1] + lw + len(s))
    return out


# -- the arrays ------------------------------------------------------------------------------


def vocab(rng: random.Random, n: int) -> list[bytes]:
    """Token-like strings: mostly 1-12 bytes of UTF-8, as real vocabularies are."""
    alphabet = "abcdefghijklmnopqrstuvwxyz▁ĠéあÿABC0123456789 "
    return [
        "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))).encode()[:255] or b"x"
        for _ in range(n)
    ]


def awkward(rng: random.Random) -> list[bytes]:
    """Everything that breaks a chain of short strings, spread through a vocabulary."""
    lw8_fake = b"\x05" + bytes(7) + b"hello"  # a whole little-endian element inside data
    be_fake = bytes(7) + b"\x05hello"
    specials: list[bytes] = [
        b"",
        b"",
        b"",
        b"\x00",
        bytes(7),
        bytes(8),
        bytes(20),
        b"a" + bytes(8) + b"b",
        b"ab\x00",
        b"\x00ab",
        lw8_fake,
        be_fake,
        b"\x03\x00\x00\x00abc",
        bytes(255),
        b"y" * 255,
        b"z" * 256,  # length 256: low byte 0
        b"w" * 300,
        b"v" * 511,
        b"u" * 512,
        b"\x01" * 9,
    ]
    items = vocab(rng, 600)
    for s in specials:
        items.insert(rng.randrange(len(items) + 1), s)
    items[rng.randrange(len(items)) :] += [b""] * 40  # a run of empty strings
    items.insert(rng.randrange(len(items)), b"L" * (70 * 1024))
    return items


def uniform(rng: random.Random) -> list[bytes]:
    return vocab(rng, 900)


def all_empty(rng: random.Random) -> list[bytes]:
    return [b""] * 700


def long_only(rng: random.Random) -> list[bytes]:
    return [bytes([rng.randrange(1, 256)]) * rng.randint(256, 2000) for _ in range(60)]


def nul_heavy(rng: random.Random) -> list[bytes]:
    return [bytes(rng.choice([0, 0, 0, 1, 65]) for _ in range(rng.randint(0, 24))) for _ in range(800)]


CASES = {"uniform": uniform, "awkward": awkward, "empty": all_empty, "long": long_only, "nul": nul_heavy}

# (min vector count, min window, window): the shipped settings, and tiny windows that put
# window edges inside prefixes and data everywhere.
WINDOWS = [None, (1, 1, 64), (1, 16, 200), (8, 64, 4096)]
WINDOW_IDS = ["shipped", "w64", "w200", "w4096"]


@pytest.fixture(params=WINDOWS, ids=WINDOW_IDS)
def windows(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.param is not None:
        min_count, min_window, window = request.param
        monkeypatch.setattr(strings, "_MIN_VECTOR_COUNT", min_count)
        monkeypatch.setattr(strings, "_MIN_WINDOW", min_window)
        monkeypatch.setattr(strings, "_WINDOW", window)


def cuts(bounds: list[int], lw: int, rng: random.Random, limit: int = 40) -> Iterator[int]:
    """Buffer ends at and around element boundaries: inside a prefix, in data, at an edge."""
    chosen = bounds[:6] + bounds[-6:] + rng.sample(bounds, min(limit, len(bounds)))
    seen: set[int] = set()
    for b in chosen:
        for cut in (b - 1, b, b + 1, b + lw // 2, b + lw - 1, b + lw, b + lw + 1, b + lw + 3):
            if cut >= 0 and cut not in seen:
                seen.add(cut)
                yield cut


@pytest.mark.usefixtures("windows")
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize(("lw", "big"), FORMATS, ids=FORMAT_IDS)
def test_walk_matches_reference_at_every_cut(case: str, lw: int, big: bool) -> None:
    rng = random.Random(f"{case}-{lw}-{big}")
    items = CASES[case](rng)
    head = b"\x07" * 13  # an odd offset for the array start
    # More strings follow the array, so that walking past `count` would show.
    tail = encode([b"next", b"k" * 9] * 40, lw, big)
    buf = head + encode(items, lw, big) + tail
    start, count = len(head), len(items)
    bounds = boundaries(items, start, lw)
    assert strings.walk_strings(buf, start, count, lw, big, 2**64) == (count, bounds[-1])
    assert list(strings.string_offsets(buf, start, count, lw, big)) == bounds
    for cut in cuts(bounds, lw, rng):
        part = buf[:cut]
        for max_len in (2**70, 300):
            expect = ref_walk(part, start, count, lw, big, max_len)
            assert strings.walk_strings(part, start, count, lw, big, max_len) == expect, (cut, max_len)
            # The starts collected are those of exactly the elements walked.
            assert walk_with_starts(part, start, count, lw, big, max_len) == (expect, bounds[: expect[0]])


@pytest.mark.usefixtures("windows")
@pytest.mark.parametrize(("lw", "big"), FORMATS, ids=FORMAT_IDS)
@pytest.mark.parametrize("max_len", [0, 1, 3, 11, 254, 255, 256, 299, 300, 70 * 1024])
def test_length_limit_stops_at_the_first_long_element(lw: int, big: bool, max_len: int) -> None:
    items = awkward(random.Random(max_len))
    buf = encode(items, lw, big)
    expect = ref_walk(buf, 0, len(items), lw, big, max_len)
    assert strings.walk_strings(buf, 0, len(items), lw, big, max_len) == expect
    if max_len < 70 * 1024:
        assert expect[0] < len(items)


@pytest.mark.usefixtures("windows")
@pytest.mark.parametrize(("lw", "big"), FORMATS, ids=FORMAT_IDS)
def test_count_stops_inside_a_chain(lw: int, big: bool) -> None:
    items = vocab(random.Random(5), 2000)
    buf = encode(items, lw, big)
    bounds = boundaries(items, 0, lw)
    for count in (0, 1, 2, 511, 512, 513, 700, 1234, 1999, 2000):
        assert strings.walk_strings(buf, 0, count, lw, big, 2**64) == (count, bounds[count])


@pytest.mark.parametrize(("lw", "big"), FORMATS, ids=FORMAT_IDS)
def test_hostile_lengths(lw: int, big: bool) -> None:
    """Huge lengths, near-wrap values and lengths just past the buffer are stopped at exactly."""
    order = "big" if big else "little"
    items = vocab(random.Random(9), 1500)
    for bad in (2 ** (8 * lw) - 1, 2 ** (8 * lw) - 5, 2**63 if lw == 8 else 2**31, 70_000, 1):
        for where in (0, 1, 700, 1499):
            buf = bytearray(encode(items, lw, big))
            at = boundaries(items, 0, lw)[where]
            buf[at : at + lw] = bad.to_bytes(lw, order)
            data = bytes(buf)
            for max_len in (2**70, 2 ** (8 * lw) - 1, 16 * 2**20):
                expect = ref_walk(data, 0, len(items), lw, big, max_len)
                assert strings.walk_strings(data, 0, len(items), lw, big, max_len) == expect


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    items=st.lists(
        st.one_of(
            st.binary(min_size=1, max_size=12),
            st.sampled_from([b"", bytes(7), bytes(9), b"\x02" + bytes(7), bytes(7) + b"\x02", b"q" * 260]),
        ),
        min_size=0,
        max_size=400,
    ),
    fmt=st.sampled_from(FORMATS),
    window=st.integers(8, 300),
    cut=st.integers(0, 10**6),
    max_len=st.sampled_from([0, 2, 255, 256, 2**64]),
)
def test_random_arrays(
    items: list[bytes], fmt: tuple[int, bool], window: int, cut: int, max_len: int
) -> None:
    lw, big = fmt
    buf = encode(items, lw, big)
    buf = buf[: cut % (len(buf) + 1)]
    saved = strings._MIN_VECTOR_COUNT, strings._MIN_WINDOW, strings._WINDOW
    strings._MIN_VECTOR_COUNT, strings._MIN_WINDOW, strings._WINDOW = 1, 1, window
    try:
        got = strings.walk_strings(buf, 0, len(items), lw, big, max_len)
        got_with, starts = walk_with_starts(buf, 0, len(items), lw, big, max_len)
    finally:
        strings._MIN_VECTOR_COUNT, strings._MIN_WINDOW, strings._WINDOW = saved
    expect = ref_walk(buf, 0, len(items), lw, big, max_len)
    assert got == got_with == expect
    assert starts == boundaries(items, 0, lw)[: expect[0]]


def test_memory_is_bounded_by_the_window() -> None:
    """Temporaries are per window, whatever the size of the array."""
    items = vocab(random.Random(3), 400_000)
    buf = encode(items, 8, False)
    assert len(buf) > 5 * 2**20
    tracemalloc.start()
    try:
        assert strings.walk_strings(buf, 0, len(items), 8, False, 2**64)[0] == len(items)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= 8 * strings._WINDOW


# -- the parser: same headers, errors and estimates as with the old walk ---------------------


_STRING_BLOCK = 4096


def old_skip_strings(self: Any, start: int, count: int, field: str) -> int:
    """The parser's string walk before the numpy walk, verbatim: a Python loop over blocks
    of 4096 lengths, falling back to the checked walk at the last sound block."""
    buf, unpack, lw, n = self.buf, self.length.unpack_from, self.lw, self.n
    max_len = self.limits.max_string_length
    pos = block_pos = start
    done = 0  # elements before block_pos, all complete inside the buffer
    try:
        while done < count:
            step = min(_STRING_BLOCK, count - done)
            for _ in range(step):
                pos += lw + unpack(buf, pos)[0]
            if pos > n:
                break
            done += step
            block_pos = pos
    except (struct.error, OverflowError):  # OverflowError: an offset beyond ssize_t
        pass
    if done < count or pos > n or pos - start - lw * count > max_len:
        if block_pos - start - lw * done > max_len:
            done, block_pos = 0, start
        return int(self._skip_strings_checked(start, count, field, done, block_pos))
    if field == reader._TOKENS_KEY and count:
        self.vocab_mean = (pos - start) / count - lw
    return int(pos)


def old_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Put the old walk back in the parser."""
    monkeypatch.setattr(reader._Parser, "_skip_strings", old_skip_strings)


def outcome(
    data: bytes, file_size: int | None, limits: Limits | None = None, progress: ParseProgress | None = None
) -> tuple[Any, ...]:
    try:
        header = parse_header(data, file_size=file_size, limits=limits, progress=progress)
    except NeedMoreData as exc:
        return ("more", exc.needed, exc.have, exc.field)
    except GGUFError as exc:
        return (type(exc).__name__, str(exc), exc.field, exc.offset)
    arrays = {
        k: (f.offset, f.value.offset, f.value.nbytes, f.value.count)
        for k, f in header.fields.items()
        if isinstance(f.value, GGUFArray)
    }
    return ("ok", header.data_offset, arrays)


def model_header(version: int, endian: str, rng: random.Random) -> bytes:
    b = HeaderBuilder(version=version, endian=endian)
    b.kv("general.architecture", ValueType.STRING, "llama")
    b.kv("tokenizer.ggml.model", ValueType.STRING, "gpt2")
    b.kv("tokenizer.ggml.pre", ValueType.STRING, "llama-bpe")
    tokens = awkward(rng)
    b.kv("tokenizer.ggml.tokens", ValueType.ARRAY, Arr(ValueType.STRING, tokens))
    b.kv("tokenizer.ggml.token_type", ValueType.ARRAY, Arr(ValueType.INT32, [1] * len(tokens)))
    merges = [b"%s %s" % (a[:5] or b"a", c[:5] or b"b") for a, c in itertools.pairwise(tokens)]
    b.kv("tokenizer.ggml.merges", ValueType.ARRAY, Arr(ValueType.STRING, merges))
    b.kv("nested", ValueType.ARRAY, Arr(ValueType.ARRAY, [Arr(ValueType.STRING, vocab(rng, 600))] * 2))
    b.kv("tokenizer.chat_template", ValueType.STRING, "{{ messages }}")
    b.tensor("token_embd.weight", [64, len(tokens)], reader.GGMLType.F32)
    return b.build()


@pytest.mark.parametrize("version", [1, 2, 3])
@pytest.mark.parametrize("endian", ["<", ">"])
def test_parser_matches_old_walk_at_every_cut(
    version: int, endian: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(f"{version}{endian}")
    data = model_header(version, endian, rng)
    header = parse_header(data)
    lw = 4 if version == 1 else 8
    # Cuts around every element boundary of a sample of each string array, plus random ones.
    points: set[int] = set(rng.sample(range(len(data)), 150))
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges"):
        arr = header.fields[key].value
        assert isinstance(arr, GGUFArray)
        bounds = [arr.offset]
        for _ in range(arr.count):
            size = int.from_bytes(data[bounds[-1] : bounds[-1] + lw], "big" if endian == ">" else "little")
            bounds.append(bounds[-1] + lw + size)
        assert bounds[-1] == arr.offset + arr.nbytes
        points.update(c for c in cuts(bounds, lw, rng, limit=25) if c < len(data))
    limit_sets = [None, Limits(max_string_length=255), Limits(max_string_length=300)]
    runs = [
        (data[:cut], cut if whole else None, lim)
        for cut in sorted(points)
        for whole in (False, True)
        for lim in limit_sets
    ]
    runs.append((data, None, None))
    fast = [outcome(*run) for run in runs]
    assert fast[-1][0] == "ok"
    old_walk(monkeypatch)
    for run, got in zip(runs, fast, strict=True):
        assert got == outcome(*run), (len(run[0]), run[1], run[2])


def vocabulary_arrays(header: Any) -> Iterator[GGUFArray]:
    """The tokens and, when the file has them, the merges of a parsed header."""
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges"):
        field = header.fields.get(key)
        if field is not None:
            assert isinstance(field.value, GGUFArray)
            yield field.value


def test_real_vocabulary_estimates_match_old_walk(
    sample_model_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cuts inside the real tokens and merges: same NeedMoreData (needed, field) both ways."""
    with sample_model_path.open("rb") as f:
        data = f.read(8 * 1024 * 1024)
    header = parse_header(data)
    data = data[: header.data_offset]
    rng = random.Random(sample_model_path.name)
    points: list[int] = []
    for arr in vocabulary_arrays(header):
        body = arr.offset
        points += [body, body + 3, body + arr.nbytes - 1, body + arr.nbytes]
        points += rng.sample(range(body, body + arr.nbytes), 12)
    fast = [outcome(data[:cut], None) for cut in points]
    assert all(o[0] == "more" for o in fast)
    old_walk(monkeypatch)
    assert fast == [outcome(data[:cut], None) for cut in points]


def test_string_lengths_follow_the_file_byte_order() -> None:
    """A length is read in the file's order: 5 as big endian is 5 << 56 as little endian."""
    be = struct.pack(">Q", 5) + b"hello"
    assert strings.walk_strings(be, 0, 1, 8, True, 2**64) == (1, 13)
    assert strings.walk_strings(be, 0, 1, 8, False, 2**64) == (0, 0)


def test_indexing_a_real_vocabulary_matches_iterating_it(sample_model_path: Path) -> None:
    """GGUFArray's element offsets come from the numpy walk: every token read by index is
    the token iteration decodes, and the offsets end where the array does."""
    with sample_model_path.open("rb") as f:
        data = f.read(8 * 1024 * 1024)
    header = parse_header(data)
    for arr in vocabulary_arrays(header):
        listed = arr.to_list()
        assert [arr[i] for i in range(len(arr))] == listed
        assert arr[-1] == listed[-1]
        offsets = arr._element_offsets()
        assert len(offsets) == len(arr) + 1
        assert int(offsets[0]) == arr.offset and int(offsets[-1]) == arr.offset + arr.nbytes


@pytest.mark.parametrize(("lw", "big"), FORMATS, ids=FORMAT_IDS)
def test_offsets_of_an_array_that_does_not_fit_are_refused(lw: int, big: bool) -> None:
    items = vocab(random.Random(11), 1000)
    buf = encode(items, lw, big)
    with pytest.raises(ValueError, match="ends after element 999 of 1000"):
        strings.string_offsets(buf[:-1], 0, len(items), lw, big)


@pytest.mark.usefixtures("windows")
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize(("lw", "big"), FORMATS, ids=FORMAT_IDS)
def test_a_resumed_walk_is_the_walk_from_the_start(case: str, lw: int, big: bool) -> None:
    """Walking a prefix, then the whole buffer from where that stopped: the same result
    and the same element starts as one walk of the whole buffer."""
    rng = random.Random(f"resume-{case}-{lw}-{big}")
    items = CASES[case](rng)
    buf = encode(items, lw, big) + encode([b"after"] * 30, lw, big)
    count = len(items)
    bounds = boundaries(items, 0, lw)
    for cut in cuts(bounds, lw, rng):
        for max_len in (2**70, 300):
            first = strings.walk_strings(buf[:cut], 0, count, lw, big, max_len)
            parts: list[Any] = []
            got = strings.walk_strings(buf, 0, count, lw, big, max_len, parts, resume=first)
            assert got == ref_walk(buf, 0, count, lw, big, max_len), (cut, max_len)
            assert [int(x) for p in parts for x in p] == bounds[first[0] : got[0]]


@pytest.mark.parametrize("version", [1, 2, 3])
@pytest.mark.parametrize("endian", ["<", ">"])
def test_parses_of_growing_prefixes_with_progress_match_fresh_parses(version: int, endian: str) -> None:
    """A reader's attempts on a growing buffer, sharing one ParseProgress, give at every
    step what a fresh parse of that buffer gives: the same NeedMoreData estimate, error or
    header."""
    rng = random.Random(f"progress-{version}{endian}")
    data = model_header(version, endian, rng)
    for limits in (None, Limits(max_string_length=255), Limits(max_string_length=300)):
        for _ in range(12):
            progress = ParseProgress()
            cuts_up = [*sorted(rng.sample(range(1, len(data)), 8)), len(data)]
            for cut in cuts_up:
                fresh = outcome(data[:cut], None, limits)
                assert outcome(data[:cut], None, limits, progress) == fresh, (cut, limits)
                if fresh[0] != "more":
                    break


def test_progress_resumes_inside_a_real_vocabulary(sample_model_path: Path) -> None:
    """The second attempt on a real model continues the vocabulary walk of the first: its
    header equals a fresh parse's, and the walk it resumed is recorded."""
    with sample_model_path.open("rb") as f:
        data = f.read(8 * 1024 * 1024)
    full = parse_header(data)
    tokens = full.fields["tokenizer.ggml.tokens"].value
    assert isinstance(tokens, GGUFArray)
    cut = tokens.offset + tokens.nbytes // 2
    progress = ParseProgress()
    with pytest.raises(NeedMoreData) as first:
        parse_header(data[:cut], progress=progress)
    assert first.value.field.startswith("tokenizer.ggml.tokens[")
    done, pos = progress.strings[tokens.offset]
    assert 0 < done < tokens.count and tokens.offset < pos <= cut
    again = parse_header(data[: full.data_offset], progress=progress)
    assert outcome(data[: full.data_offset], None, None, progress) == outcome(data[: full.data_offset], None)
    assert again.data_offset == full.data_offset
    assert again.fields["tokenizer.ggml.tokens"].value.to_list() == tokens.to_list()
