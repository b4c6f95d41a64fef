"""Read the headers of sibling quantizations of one model for a fraction of their bytes.

The quants of one model in one repo share most of their header bytes: the same keys in the
same order and byte-identical vocabulary arrays; what differs is a few values
(`general.file_type`, `quantize.imatrix.*`) and the tensor-info region. The leader is read
in full (`HubHttp.fetch_header`). For a sibling, one multi-range request asks for:

- its first bytes up to a little past the start of the leader's first large array;
- the bytes between the leader's large arrays (the next keys and array headers) and a
  small edge at the start and end of every large array;
- `samples` ranges of `SAMPLE_BYTES` inside each large array, at random places, one per
  stratum;
- its tail: the rest of the key/value section and the tensor infos, as long as the
  leader's plus a margin (one more range when the sibling's is longer).

The large arrays' bytes are taken from the leader, and the parser takes the leader's parsed
arrays for them without walking them again (`parse_header(known=...)`); its tensor infos
are read against the leader's names and shapes (`TensorTemplate`). The sibling is
trusted only when every proof holds: the parse meets each large array exactly where the
leader's layout puts it, with the same key, element type and count; every sampled byte
equals the leader's; its data offset plus the aligned sizes of its tensors equals the size
the hub lists; and the file did not change between requests (If-Range). Anything else,
and any error, falls back to a full read, and the reason is counted and logged.

A server that does not answer multi-range requests is sent the same ranges one request
each, in parallel, with one sample per array as long as all of them; one that honours no
range at all makes the repo's later siblings full reads.

What sampling cannot prove is a change confined between samples that keeps every length
(docs/crawling.md gives the odds).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import random
import struct
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from registry.gguf.array import GGUFArray
from registry.gguf.errors import GGUFError, NeedMoreData
from registry.gguf.filename import model_stem, parse_shard
from registry.gguf.reader import parse_header
from registry.gguf.tensor_template import TensorTemplate
from registry.gguf.types import ValueType
from registry.hub.errors import HubError
from registry.hub.http import HubHttp, RemoteHeader
from registry.hub.ranges import MAX_RANGES, NoMultiRange, RangeAnswer, fetch_ranges, merge

if TYPE_CHECKING:
    from registry.gguf.facts_model import Facts
    from registry.gguf.limits import Limits
    from registry.gguf.model import GGUFHeader

log = logging.getLogger(__name__)

LARGE_ARRAY = 4096  # bytes; smaller arrays are fetched with the bytes around them
SAMPLE_BYTES = 1024
EDGE_BYTES = 256  # of each large array's start and end, fetched with the bytes beside it
PREFIX_SLACK = 4096  # past the leader's first large array: room for a longer sibling prefix
TAIL_MARGIN = 4096  # past the leader's tail: imatrix keys the leader may lack

Mode = Literal["full", "sibling"]


@dataclass(frozen=True)
class HeaderRead:
    """How one file's header was read: in full, or from a sibling's (the leader's) bytes."""

    mode: Mode = "full"
    leader: str | None = None  # the leader's path, for a sibling read
    samples: int = 0  # ranges sampled inside the leader's large arrays
    fallback: str | None = None  # why a sibling read was not trusted (then mode is full)


@dataclass
class SiblingStats:
    """What sibling reads did in one crawl: reads trusted, and fallbacks by reason."""

    reads: int = 0
    fallbacks: Counter[str] = field(default_factory=Counter)


def sibling_families(paths: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """Each path that has a sibling, mapped to all paths of its family (in name order).

    A family is two or more files of one folder whose names differ only in their
    quantization label (single files, and shard 1 of split sets: `model_stem`); projectors,
    adapters, imatrix files and shards 2..N are in none.
    The architecture is checked once the leader is read.
    """
    families: dict[str, list[str]] = {}
    for path in sorted(set(paths)):
        stem = model_stem(path)
        if stem is not None:
            families.setdefault(stem, []).append(path)
    return {p: tuple(members) for members in families.values() if len(members) > 1 for p in members}


@dataclass(frozen=True)
class _Span:
    """One large array of the leader: where its value starts and where its elements lie."""

    key: str
    value_at: int  # offset of the array's element type
    body: int  # offset of its first element
    array: GGUFArray

    @property
    def end(self) -> int:
        return self.body + self.array.nbytes


@dataclass(frozen=True)
class Leader:
    """A header read in full, whose large arrays its siblings may reuse."""

    path: str
    remote: RemoteHeader
    facts: Facts | None
    spans: tuple[_Span, ...]
    tensors: TensorTemplate | None

    @classmethod
    def of(cls, path: str, remote: RemoteHeader, facts: Facts | None) -> Leader:
        spans = []
        header = remote.header
        for f in header.fields.values():
            value = f.value
            if f.type is ValueType.ARRAY and isinstance(value, GGUFArray) and value.nbytes >= LARGE_ARRAY:
                lw = value.length_width
                spans.append(_Span(f.key, value.offset - 4 - lw, value.offset, value))
        return cls(path, remote, facts, tuple(spans), TensorTemplate.of(header))

    @property
    def header(self) -> GGUFHeader:
        return self.remote.header

    @property
    def useful(self) -> bool:
        """Worth reusing: it has large arrays, and tensors for the size proof."""
        return bool(self.spans) and bool(self.header.tensors)


class SiblingFallback(Exception):
    """A sibling read that cannot be trusted; `reason` is a short code."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclass
class _Attempt:
    bytes: int = 0
    requests: int = 0
    etag: str | None = None
    final_url: str | None = None
    samples: int = 0


class SiblingReader:
    """Reads siblings against their leader with one HubHttp; falls back to full reads."""

    def __init__(
        self,
        http: HubHttp,
        *,
        samples: int = 16,
        stats: SiblingStats | None = None,
        rng: random.Random | None = None,
    ) -> None:
        # Without `rng`, each file's sample places come from its path and size: random
        # with respect to its content, and the same on every crawl, so that two crawls of
        # one revision fetch the same bytes.
        self.http = http
        self.samples = max(1, samples)
        self.stats = stats if stats is not None else SiblingStats()
        self._rng = rng
        # Learnt from the first server answer that ignores a multi-range request: from then on
        # the ranges go as single-range requests, in parallel, with one longer sample per array.
        self._single = False
        self._no_ranges = False  # not even single ranges honoured: later siblings read in full

    async def read(
        self,
        leader: Leader,
        url: str,
        *,
        path: str,
        expected_size: int | None,
        limits: Limits | None = None,
        first_window: int | None = None,
    ) -> tuple[RemoteHeader, HeaderRead]:
        """The sibling's header and how it was read; a full read when a proof fails."""
        attempt = _Attempt()
        reason = "no_ranges" if self._no_ranges else None
        if reason is None and (expected_size is None or not leader.useful):
            reason = "no_size" if expected_size is None else "leader_unusable"
        if reason is None:
            assert expected_size is not None
            rng = self._rng or random.Random(f"{path}\0{expected_size}")
            try:
                try:
                    remote = await self._read(leader, url, expected_size, limits, attempt, rng)
                except NoMultiRange:
                    if self._single:
                        raise
                    self._single = True
                    log.info("%s: no multi-range requests on this server; single ranges from now on", url)
                    remote = await self._read(leader, url, expected_size, limits, attempt, rng)
            except SiblingFallback as exc:
                reason = exc.reason
                log.info("%s: sibling read of %s not trusted, read in full: %s", url, leader.path, exc)
            except HubError as exc:
                reason = exc.code
                if isinstance(exc, NoMultiRange):
                    self._no_ranges = True
                log.info("%s: sibling read failed, read in full: %s", url, exc)
            except GGUFError as exc:
                reason = "layout"
                log.info("%s: sibling bytes do not parse against %s, read in full: %s", url, leader.path, exc)
            else:
                self.stats.reads += 1
                return remote, HeaderRead("sibling", leader.path, attempt.samples)
        self.stats.fallbacks[reason] += 1
        full = await self.http.fetch_header(
            url, limits=limits, first_window=first_window, expected_size=expected_size
        )
        full = replace(
            full,
            bytes_fetched=full.bytes_fetched + attempt.bytes,
            requests=full.requests + attempt.requests,
        )
        return full, HeaderRead("full", None, 0, reason)

    # -- one sibling read -------------------------------------------------------------
    async def _read(
        self,
        leader: Leader,
        url: str,
        size: int,
        limits: Limits | None,
        attempt: _Attempt,
        rng: random.Random,
    ) -> RemoteHeader:
        first = leader.spans[0]
        answer = await self._fetch(url, self._plan(leader, 0, size, rng), size, attempt)
        prefix = answer.slice(0, min(first.body + PREFIX_SLACK, size))
        if prefix is None:
            raise SiblingFallback("layout", "the first bytes did not arrive")
        delta = _find_value(prefix, first) - first.value_at
        if delta != 0:
            # A longer or shorter prefix (another name, one key more): ask again, shifted.
            answer = await self._fetch(url, self._plan(leader, delta, size, rng), size, attempt)
        buf, end, attempt.samples = self._assemble(leader, answer, delta, size)
        known = {s.value_at + delta: s.array for s in leader.spans}
        while True:
            try:
                header = parse_header(buf, file_size=size, limits=limits, known=known, tensors_like=leader.tensors)
                break
            except NeedMoreData as need:
                if end >= size or need.needed > self.http.options.max_header_bytes:
                    raise SiblingFallback("layout", f"the header needs {need.needed} bytes") from None
                more_end = min(size, need.needed + TAIL_MARGIN)
                more = await self._fetch(url, [(end, more_end)], size, attempt)
                data = more.slice(end, more_end)
                if data is None:
                    raise SiblingFallback("layout", "the rest of the tail did not arrive") from None
                buf, end = buf + data, more_end
        _check_layout(leader, header)
        _check_size(header, size)
        return RemoteHeader(
            header=header,
            file_size=size,
            bytes_fetched=attempt.bytes,
            requests=attempt.requests,
            etag=attempt.etag,
            final_url=attempt.final_url or url,
            http_requests=attempt.requests,
            url=url,
        )

    def _plan(self, leader: Leader, delta: int, size: int, rng: random.Random) -> list[tuple[int, int]]:
        """The ranges of a sibling whose large arrays lie `delta` bytes after the leader's."""
        spans = leader.spans
        first = spans[0]
        ranges = [(0, first.body + delta + max(EDGE_BYTES, PREFIX_SLACK))]
        for a, b in itertools.pairwise(spans):
            ranges.append((a.end + delta - EDGE_BYTES, b.body + delta + EDGE_BYTES))
        last = spans[-1]
        tail = leader.header.data_offset - last.end
        ranges.append((last.end + delta - EDGE_BYTES, last.end + delta + tail + TAIL_MARGIN + tail // 8))
        per_span = max(0, min(self.samples, (MAX_RANGES - len(ranges)) // len(spans)))
        # One request a range: one sample as long as all of them, covering as many bytes (as
        # likely to meet a change at a random place) for one request instead of `samples`.
        width, per_span = (SAMPLE_BYTES * self.samples, 1) if self._single else (SAMPLE_BYTES, per_span)
        for s in spans:
            lo, hi = s.body + EDGE_BYTES, s.end - EDGE_BYTES - width
            if hi <= lo or per_span == 0:
                continue
            stratum = (hi - lo) / per_span
            for i in range(per_span):
                at = lo + int(stratum * i + rng.random() * stratum)
                ranges.append((at + delta, at + delta + width))
        return merge([(max(0, a), min(size, b)) for a, b in ranges])

    async def _fetch(
        self, url: str, ranges: Sequence[tuple[int, int]], size: int, attempt: _Attempt
    ) -> RangeAnswer:
        if len(ranges) > MAX_RANGES:  # a leader with more large arrays than one request can sample
            raise SiblingFallback("layout", f"{len(ranges)} ranges to ask for, more than {MAX_RANGES}")
        if self._single and len(ranges) > 1:
            answer = await self._fetch_singly(url, ranges, size, attempt)
        else:
            answer = await fetch_ranges(
                self.http, url, ranges, etag=attempt.etag, final_url=attempt.final_url, expected_size=size
            )
        attempt.bytes += answer.bytes
        attempt.requests += answer.requests
        attempt.etag = answer.etag
        attempt.final_url = answer.final_url
        for start, end in ranges:
            if answer.slice(start, end) is None:
                raise SiblingFallback("layout", f"the range {start}-{end} did not arrive")
        return answer

    async def _fetch_singly(
        self, url: str, ranges: Sequence[tuple[int, int]], size: int, attempt: _Attempt
    ) -> RangeAnswer:
        """Each range in a request of its own, in parallel (within the per-host limit)."""
        if attempt.etag is None:
            # The first answer tells the ETag that the others must carry (If-Range).
            first = await fetch_ranges(
                self.http, url, ranges[:1], final_url=attempt.final_url, expected_size=size
            )
            attempt.etag, attempt.final_url = first.etag, first.final_url
            answers = [first]
            ranges = ranges[1:]
        else:
            answers = []
        answers += await asyncio.gather(
            *(
                fetch_ranges(
                    self.http, url, [r], etag=attempt.etag, final_url=attempt.final_url, expected_size=size
                )
                for r in ranges
            )
        )
        joined = answers[0]
        for a in answers[1:]:
            if a.etag != joined.etag:
                raise SiblingFallback(
                    "file_changed", f"ETag {a.etag} where an earlier range had {joined.etag}"
                )
            joined.parts.update(a.parts)
            joined.bytes += a.bytes
            joined.requests += a.requests
        return joined

    def _assemble(self, leader: Leader, answer: RangeAnswer, delta: int, size: int) -> tuple[bytes, int, int]:
        """The sibling's header bytes as believed: every byte fetched in its place, after the
        sampled ones are compared with the leader's, and zeros between them. The leader's
        large arrays are not copied in: the parser takes them from the leader (`known`)."""
        end = min(size, max(at + len(data) for at, data in answer.parts.items()))
        spans = [(s.body + delta, s.end + delta, s.array.raw) for s in leader.spans]
        if any(hi > end for _, hi, _ in spans):
            raise SiblingFallback("layout", "the leader's arrays reach past the sibling's bytes")
        sampled = 0
        pieces: list[bytes | memoryview] = []
        zeros = _zeros(1 << max(end - 1, 1).bit_length())
        pos = 0
        for at, data in sorted(answer.parts.items()):
            for lo, hi, raw in spans:
                a, b = max(at, lo), min(at + len(data), hi)
                if a < b:
                    sampled += 1
                    # bytes() first: bytes compare with one memcmp, a memoryview byte by byte.
                    if data[a - at : b - at] != bytes(raw[a - lo : b - lo]):
                        raise SiblingFallback("sample_differs", f"bytes {a}-{b} differ from the leader's")
            if at > pos:
                pieces.append(zeros[: at - pos])
            if at + len(data) > pos:
                pieces.append(data[max(0, pos - at) :])
                pos = at + len(data)
        return b"".join(pieces)[:end], end, sampled


@functools.lru_cache(maxsize=8)
def _zeros(size: int) -> memoryview:
    """`size` zero bytes (a power of two), kept for the next siblings: making a zero-filled
    piece for each gap between samples took more CPU than the join. Pages never written
    stay unallocated, so the few kept cost next to no memory."""
    return memoryview(bytes(size))


def _find_value(prefix: bytes, span: _Span) -> int:
    """Where the sibling's value of the leader's first large array starts (its element type)."""
    arr = span.array
    length = arr.length_struct
    key = span.key.encode("ascii")
    u32 = "<I" if arr.endianness == "little" else ">I"
    needle = (
        length.pack(len(key)) + key + struct.pack(u32, ValueType.ARRAY) + struct.pack(u32, arr.element_type)
        + length.pack(arr.count)
    )  # fmt: skip
    at = prefix.find(needle)
    if at < 0:
        raise SiblingFallback("layout", f"no {span.key} array of {arr.count} elements in the first bytes")
    return at + len(length.pack(len(key))) + len(key) + 4


def _check_layout(leader: Leader, header: GGUFHeader) -> None:
    """Every large array of the leader was taken as a value of the same key."""
    for s in leader.spans:
        f = header.fields.get(s.key)
        if f is None or f.value is not s.array:
            raise SiblingFallback("layout", f"{s.key} is not where the leader's layout puts it")
    arch, mine = leader.header.get("general.architecture"), header.get("general.architecture")
    if arch != mine:
        raise SiblingFallback("architecture", f"{mine!r} is not the leader's {arch!r}")


def _check_size(header: GGUFHeader, size: int) -> None:
    """The data offset plus the aligned sizes of the tensors, packed in order, is the file size."""
    align = header.alignment
    at = 0
    for t in header.tensors:
        if t.offset != at:
            raise SiblingFallback(
                "size_proof", f"tensor {t.name!r} at {t.offset}, packed data puts it at {at}"
            )
        at += -(-t.n_bytes // align) * align
    last = header.tensors[-1] if header.tensors else None
    unpadded = header.data_offset + (last.offset + last.n_bytes if last else 0)
    if size not in (header.data_offset + at, unpadded):
        raise SiblingFallback(
            "size_proof", f"data offset {header.data_offset} and tensors of {at} bytes do not make {size}"
        )


def leaders_first(paths: Sequence[str], families: Mapping[str, tuple[str, ...]]) -> list[str]:
    """`paths` in the order to read them: each family's leader before its other members.

    The leader is the family's first single file by name, else its first member: a single
    file lists every tensor, so its tail is as long as a sibling's, where shard 1 of a split
    set lists only its own share and would make each sibling ask for the rest of its tail.
    """
    chosen: dict[tuple[str, ...], str] = {}
    for members in set(families.values()):
        singles = [m for m in members if parse_shard(m.rpartition("/")[2]) is None]
        chosen[members] = (singles or list(members))[0]
    leaders = [p for p in paths if p in families and chosen[families[p]] == p]
    return leaders + [p for p in paths if p not in leaders]
