"""Errors of the smoke-inference runner: each says what is wrong with which model file."""

from __future__ import annotations


class RunnerError(Exception):
    """Base of every runner error; `code` is a stable machine-readable name."""

    code = "runner_error"

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


class UnsupportedArchitecture(RunnerError):
    code = "unsupported_architecture"

    def __init__(self, arch: str, variant: str | None = None) -> None:
        self.arch = arch
        self.variant = variant
        what = f"architecture {arch!r}" + (f" with {variant}" if variant else "")
        super().__init__(f"no forward pass for {what}")


class MissingKey(RunnerError):
    code = "missing_key"

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"required metadata key {key!r} is missing")


class BadMetadata(RunnerError):
    """A key is present but its value cannot be used (wrong type, out of range)."""

    code = "bad_metadata"

    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        super().__init__(f"metadata key {key!r}: {reason}")


class MissingTensor(RunnerError):
    code = "missing_tensor"

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"required tensor {name!r} is missing")


class BadTensor(RunnerError):
    """A tensor with the wrong shape, or whose data lies outside the file."""

    code = "bad_tensor"

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        super().__init__(f"tensor {name!r}: {reason}")


class TokenizerUnsupported(RunnerError):
    code = "tokenizer_unsupported"


class NonFiniteLogits(RunnerError):
    code = "non_finite_logits"

    def __init__(self, position: int, count: int) -> None:
        self.position = position
        self.count = count
        super().__init__(f"{count} non-finite logits at position {position}")


class ContextOverflow(RunnerError):
    code = "context_overflow"

    def __init__(self, needed: int, n_ctx: int) -> None:
        self.needed = needed
        self.n_ctx = n_ctx
        super().__init__(f"{needed} positions needed, the cache holds {n_ctx}")
