"""Comparison helpers shared by the dequantization tests."""

from __future__ import annotations

import numpy as np


def assert_same_bits(ours: np.ndarray, ref: np.ndarray, what: str = "") -> None:
    """Equal as float32 bit patterns, NaN payloads included."""
    ours = np.asarray(ours, dtype=np.float32).reshape(-1)
    ref = np.asarray(ref, dtype=np.float32).reshape(-1)
    assert ours.shape == ref.shape, f"{what}: shape {ours.shape} != {ref.shape}"
    a, b = ours.view(np.uint32), ref.view(np.uint32)
    if not np.array_equal(a, b):
        bad = np.flatnonzero(a != b)
        i = int(bad[0])
        raise AssertionError(
            f"{what}: {bad.size} of {a.size} values differ; first at {i}: "
            f"ours {ours[i]!r} ({a[i]:#010x}) vs reference {ref[i]!r} ({b[i]:#010x})"
        )


def assert_same_values_nan_positions(ours: np.ndarray, ref: np.ndarray, what: str = "") -> None:
    """Equal bit for bit except that NaNs only need to be NaN at the same places."""
    ours = np.asarray(ours, dtype=np.float32).reshape(-1)
    ref = np.asarray(ref, dtype=np.float32).reshape(-1)
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(ours), nan), f"{what}: NaN positions differ"
    assert_same_bits(ours[~nan], ref[~nan], what)
