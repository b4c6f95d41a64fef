"""One exception hierarchy for everything wrong with a GGUF file.

Every error names the field it is about and the byte offset where it was found, so a
catalog row can say exactly why a file was rejected.
"""

from __future__ import annotations


class GGUFError(Exception):
    """Base of every format error. `code` is a stable machine-readable name."""

    code = "gguf_error"

    def __init__(self, message: str, *, field: str | None = None, offset: int | None = None) -> None:
        self.message = message
        self.field = field
        self.offset = offset
        where = []
        if field is not None:
            where.append(f"field {field!r}")
        if offset is not None:
            where.append(f"offset {offset}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)

    def to_dict(self) -> dict[str, object]:
        return {"code": self.code, "message": self.message, "field": self.field, "offset": self.offset}


class NeedMoreData(Exception):
    """Not an error of the file: the parser needs `needed` bytes in total to go on.

    `needed` is the best estimate the parser can make of the whole header size from what it
    has seen so far; a reader fetches up to it and calls the parser again.
    """

    def __init__(self, needed: int, *, have: int, field: str | None = None) -> None:
        self.needed = needed
        self.have = have
        self.field = field
        super().__init__(f"need {needed} bytes, have {have}" + (f" (reading {field!r})" if field else ""))


class BadMagic(GGUFError):
    code = "bad_magic"


class UnsupportedVersion(GGUFError):
    code = "unsupported_version"


class TruncatedFile(GGUFError):
    """The file (its size is known) ends before the structure does."""

    code = "truncated"


class LimitExceeded(GGUFError):
    """A count, length, size or depth beyond what the file can hold or a configured limit."""

    code = "limit_exceeded"


class InvalidValue(GGUFError):
    """A value that breaks the format's rules (bad bool byte, non-ASCII key, bad alignment...)."""

    code = "invalid_value"


class BadAlignment(InvalidValue):
    """`general.alignment` that is not an integer power of two (llama.cpp refuses the file)."""


class UnknownValueType(GGUFError):
    code = "unknown_value_type"


class UnknownTensorType(GGUFError):
    """A ggml type id that is unknown, or one that ggml has removed."""

    code = "unknown_tensor_type"


class DuplicateKey(GGUFError):
    code = "duplicate_key"


class DuplicateTensor(GGUFError):
    code = "duplicate_tensor"


class InvalidTensor(GGUFError):
    """Bad tensor info: dimensions, element count, block multiple, offset, overlap, bounds."""

    code = "invalid_tensor"


class BlockSizeMismatch(InvalidTensor):
    """A row length that is not a multiple of its type's block size (llama.cpp refuses it)."""


class TensorOutOfBounds(TruncatedFile):
    """Tensor data that ends past the end of the file (llama.cpp refuses the file)."""


class InconsistentShards(GGUFError):
    """The headers of a split model do not belong together."""

    code = "inconsistent_shards"


class PastEndOfFile(TruncatedFile, LimitExceeded):
    """A declared length or count reaches past the end of a file whose size is known.

    A truncated file and a hostile length look the same from the header, so this is both:
    `except TruncatedFile` and `except LimitExceeded` each catch it.
    """

    code = "past_end_of_file"
