"""Fast walk over the length prefixes of a GGUF array of strings, without decoding.

A string array is `count` elements of [length][bytes], the length a 4 (GGUF v1) or 8
byte unsigned integer in the file's byte order. Only the end of the array is wanted, but
the lengths form a chain: element k + 1 starts where element k ends. A Python loop over
that chain costs ~43 ns a string, ~11 ms for a 262k-token vocabulary.

The numpy walk guesses where elements start and then proves the guesses. A length of
1..255 is one nonzero byte and lw - 1 zero bytes (the nonzero one first in little endian,
last in big endian), so a vectorised scan for that byte pattern finds every such element
start, plus a few false ones inside string bytes that hold NULs. For each guess `c` the
length is read at `c`, giving `next[c] = c + lw + length`. Walking from a known element
start `pos`: if `pos` is a guess and `next` of each guess is the following guess, every
guess on that stretch is an element start, by induction on the chain itself; the
heuristic only decides how far one vectorised step gets, never what the walk visits.
Where the chain breaks (an empty string, one of 256 bytes or more, a false guess, a guess
lost at a window edge) a plain Python loop walks up to the next guess and the chain
resumes there.

Every element accepted ends inside the buffer and is at most `max_len` bytes long; the
walk stops at the first element that is not, so the caller's checked walk raises the same
error (or NeedMoreData with the same position and mean) as a walk from the start would.
"""

from __future__ import annotations

import struct
from array import array
from typing import Any

import numpy as np

__all__ = ["string_offsets", "walk_strings"]

# Below this many elements left, numpy's per-call overhead (~25 calls, ~30 us a window)
# costs more than the Python loop (~60-100 ns an element).
_MIN_VECTOR_COUNT = 512
# Bytes scanned per vectorised step. Temporaries come to ~7 bytes per window byte at
# worst, so windows bound memory whatever the buffer size. Measured on the real
# vocabularies: 128 KiB 2.11 ms, 256 KiB 1.84, 512 KiB 1.69, 1 MiB 1.75 (per-window
# overhead against cache misses once the temporaries outgrow the L2 cache).
_WINDOW = 512 * 1024
_MIN_WINDOW = 4 * 1024
# Bytes per element guessed for sizing the first window, before any mean is known.
_FIRST_GUESS = 16
# Windows are sized from the mean so far, with slack so that the last one rarely falls
# short (a short window costs one more window; a long one scans bytes past the array).
_WINDOW_SLACK = 1.25
# Elements per chain stretch below which the rest of a window is walked by the plain loop.
_BREAKS_PER_LOOP = 32

_LENGTH_STRUCTS = {
    ("<", 4): struct.Struct("<I"),
    ("<", 8): struct.Struct("<Q"),
    (">", 4): struct.Struct(">I"),
    (">", 8): struct.Struct(">Q"),
}
_WORD_DTYPES: dict[int, np.dtype[Any]] = {4: np.dtype(np.uint32), 8: np.dtype(np.uint64)}


def walk_strings(
    buf: bytes,
    start: int,
    count: int,
    length_width: int,
    big_endian: bool,
    max_len: int,
    starts: list[np.ndarray[Any, np.dtype[np.int64]]] | None = None,
    resume: tuple[int, int] | None = None,
) -> tuple[int, int]:
    """Walk an array of `count` strings at `start` in `buf`: (elements walked, end).

    Stops early only at the first element whose length prefix does not fit in `buf`, whose
    length is above `max_len`, or whose bytes run past the end of `buf`; it then returns
    that element's index and offset, for the caller's checked walk to report. With
    `starts`, the start offset of every element walked is appended to it, in order, as
    int64 arrays (their concatenation has one entry per element walked). `resume`, the
    (elements walked, offset) of an earlier walk of the same array over a prefix of `buf`,
    starts there instead of at the first element (`starts` then begins at that element).
    """
    lw = length_width
    unpack = _LENGTH_STRUCTS[(">" if big_endian else "<", lw)].unpack_from
    n = len(buf)
    done, pos = resume if resume is not None else (0, start)
    while done < count:
        left = count - done
        if left < _MIN_VECTOR_COUNT or n - pos < _MIN_WINDOW:
            done, pos, _ = _walk_loop(buf, pos, done, count, n, lw, unpack, max_len, starts)
            return done, pos
        # Size the window from the mean element so far: scanning far past the array's end
        # is wasted work, falling short costs one more window.
        mean = (pos - start) / done if done else lw + _FIRST_GUESS
        size = min(_WINDOW, max(_MIN_WINDOW, int(left * mean * _WINDOW_SLACK)))
        stop = min(n, pos + size)
        done, pos, fault = _walk_window(buf, pos, stop, done, count, lw, big_endian, unpack, max_len, starts)
        if fault:
            break
    return done, pos


def string_offsets(
    buf: bytes, start: int, count: int, length_width: int, big_endian: bool
) -> np.ndarray[Any, np.dtype[np.int64]]:
    """Start of every element of an array of `count` strings at `start`, plus its end.

    For an array already walked whole (a parsed header's): one entry per element, then the
    array's end. Raises ValueError when the array does not fit in `buf`.
    """
    starts: list[np.ndarray[Any, np.dtype[np.int64]]] = []
    done, end = walk_strings(buf, start, count, length_width, big_endian, 2**64, starts)
    if done < count:
        raise ValueError(f"string array at {start} ends after element {done} of {count}")
    starts.append(np.array([end], dtype=np.int64))
    return np.concatenate(starts)


def _walk_loop(
    buf: bytes,
    pos: int,
    done: int,
    count: int,
    stop: int,
    lw: int,
    unpack: Any,
    max_len: int,
    starts: list[np.ndarray[Any, np.dtype[np.int64]]] | None = None,
) -> tuple[int, int, bool]:
    """Walk elements one by one while they start before `stop`: (done, pos, fault)."""
    n = len(buf)
    walked = array("q") if starts is not None else None
    fault = False
    while done < count and pos < stop:
        if pos + lw > n:
            fault = True
            break
        size = unpack(buf, pos)[0]
        end = pos + lw + size
        if size > max_len or end > n:
            fault = True
            break
        if walked is not None:
            walked.append(pos)
        pos = end
        done += 1
    if walked:
        assert starts is not None
        starts.append(np.frombuffer(walked, dtype=np.int64))
    return done, pos, fault


def _candidates(
    buf: bytes, pos: int, stop: int, lw: int, big_endian: bool, max_len: int
) -> tuple[np.ndarray[Any, np.dtype[np.int64]], np.ndarray[Any, np.dtype[np.int64]]]:
    """Likely element starts in buf[pos:stop] and where each such element would end.

    Both arrays are absolute offsets, ascending. A candidate is any offset whose lw-byte
    length prefix lies in the window and holds a value of 1..255 (and at most max_len):
    one nonzero byte and lw - 1 zero bytes, the nonzero one first in little endian, last
    in big endian. It may still not be an element start; the caller proves that.
    """
    size = stop - pos
    span = size - lw + 1  # offsets whose whole prefix is inside the window
    if span <= 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    w = np.frombuffer(buf, dtype=np.uint8, count=size, offset=pos)
    nz = w != 0
    # busy[i]: some byte of the lw - 1 from i on is nonzero, by doubling spans.
    busy = nz[:-1] | nz[1:]  # 2 bytes
    if lw == 8:
        busy = busy[:-2] | busy[2:]  # 4
        busy = busy[:-3] | busy[3:]  # 7
    else:
        busy = busy[:-1] | nz[2:]  # 3
    # The mask (nonzero byte > busy neighbours: the one nonzero byte of a length of
    # 1..255) is padded to whole lw-byte words so that it can be read a word at a time.
    mask = np.empty(-(-span // lw) * lw, dtype=np.bool_)
    mask[span:] = False
    if big_endian:
        np.greater(nz[lw - 1 :], busy[:span], out=mask[:span])
    else:
        np.greater(nz[:span], busy[1:], out=mask[:span])
    del nz, busy
    # np.flatnonzero over the byte mask costs ~0.5 ns a byte (it dominated the walk); over
    # a word view it sees lw times fewer items. Two candidates are at least lw bytes
    # apart (one's nonzero byte would be among the other's zero bytes), so no lw-byte word
    # of the mask holds two of them: the position of a word's one set byte is all there is.
    wview = mask.view(_WORD_DTYPES[lw])
    cand = np.flatnonzero(wview != 0)  # ~7x faster than on the words themselves
    bits = wview[cand]
    del mask, wview
    # The set byte's bit is at a multiple of 8 (mask bytes are 0 or 1); its float64 value
    # has exponent field 1023 + 8 * byte index, and that field >> 3 is 127 + byte index.
    # In place, to keep temporaries to a few bytes per window byte.
    byte = bits.astype(np.float64).view(np.int64)
    del bits
    byte >>= 55
    byte -= 127
    cand *= lw
    cand += byte
    del byte
    lengths = w[lw - 1 :] if big_endian else w  # the length's only nonzero byte
    ends = lengths[cand].astype(np.int64)
    if max_len < 255:
        keep = ends <= max_len
        cand, ends = cand[keep], ends[keep]
    ends += cand
    ends += lw + pos
    cand += pos  # absolute offsets
    return cand, ends


def _walk_window(
    buf: bytes,
    pos: int,
    stop: int,
    done: int,
    count: int,
    lw: int,
    big_endian: bool,
    unpack: Any,
    max_len: int,
    starts: list[np.ndarray[Any, np.dtype[np.int64]]] | None = None,
) -> tuple[int, int, bool]:
    """Walk from the element at `pos` until one starts at or after `stop`: (done, pos, fault)."""
    n = len(buf)
    cand, ends = _candidates(buf, pos, stop, lw, big_endian, max_len)
    total = len(cand)
    if not total:
        return _walk_loop(buf, pos, done, count, stop, lw, unpack, max_len, starts)
    # Links that fail: candidate k does not lead to candidate k + 1. The last candidate
    # always ends a stretch.
    breaks = np.flatnonzero(ends[:-1] != cand[1:])
    breaks = np.append(breaks, total - 1)
    j = int(np.searchsorted(cand, pos))
    # Each stretch costs a few us of lookups, ~40 elements of the plain loop. Where the
    # chain breaks that often (NUL-laden or hostile data), the rest of the window is
    # walked plainly. Counted as walked, not over the window: its end may be far past the
    # array, among tensor infos whose zero bytes break chains everywhere.
    first, stretches = done, 0
    while done < count and pos < stop:
        stretches += 1
        if stretches * _BREAKS_PER_LOOP > done - first + 4 * _BREAKS_PER_LOOP:
            return _walk_loop(buf, pos, done, count, stop, lw, unpack, max_len, starts)
        if j < total and int(cand[j]) == pos:
            # pos is an element start and a candidate: follow the proven chain to the next
            # break, or as far as the array goes.
            b = int(breaks[np.searchsorted(breaks, j)])
            steps = min(b - j + 1, count - done)
            last = j + steps - 1
            end = int(ends[last])
            if end > n:
                # Only a stretch's last element can end past the buffer (every other one
                # ends at the next candidate, inside the window): it is the fault.
                if starts is not None and steps > 1:
                    starts.append(cand[j:last])
                done += steps - 1
                pos = int(cand[last])
                return done, pos, True
            if starts is not None:
                starts.append(cand[j : last + 1])
            done += steps
            pos = end
            j = last + 1
            if j < total and int(cand[j]) == pos:
                continue  # the chain went on; only the count stopped it
            j = int(np.searchsorted(cand, pos))
            continue
        # pos is an element start the candidates missed: walk one by one up to the next
        # candidate (or the window's end) and look it up again.
        target = int(cand[j]) if j < total else stop
        done, pos, fault = _walk_loop(buf, pos, done, count, target, lw, unpack, max_len, starts)
        if fault:
            return done, pos, True
        if j < total and pos != int(cand[j]):
            j = int(np.searchsorted(cand, pos))
    return done, pos, False
