"""Reference vectors made by ggml's own C dequantizers, stored for the tests.

    python -m tests.quant.refgen                 # the default types
    python -m tests.quant.refgen Q1_0 NVFP4      # any types by name, e.g. a new kernel's

For each type: random blocks (fp16/f32 scale fields mixing sane values with zero,
subnormals, the largest finite values, +-Inf and NaNs, quant bytes covering every bit
pattern), dequantized by `ggml_get_type_traits(type)->to_float` of the libggml-base that
llama-cpp-python bundles (see bench/ggml_ref.py), saved as tests/data/quant_ref/<TYPE>.npz
with `blocks` (uint8, n x type_size), `values` (float32) and `meta` (JSON). README.md in
that folder is rewritten from the metas of all the files there.

The block generators are shared with the property tests (`random_blocks`, `pattern_blocks`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from registry.gguf.types import TENSOR_TYPES, GGMLType

OUT_DIR = Path(__file__).resolve().parent.parent / "data" / "quant_ref"
DEFAULT_TYPES = (
    "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1",
    "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K",
)  # fmt: skip
VALUES_PER_TYPE = 8192
SEED = 20250101

# Scale fields of a block: (byte offset, "f16" | "f32"). Types not listed get raw random
# bytes everywhere, which still hits NaN/Inf scales now and then.
SCALE_FIELDS: dict[GGMLType, tuple[tuple[int, str], ...]] = {
    GGMLType.Q4_0: ((0, "f16"),),
    GGMLType.Q4_1: ((0, "f16"), (2, "f16")),
    GGMLType.Q5_0: ((0, "f16"),),
    GGMLType.Q5_1: ((0, "f16"), (2, "f16")),
    GGMLType.Q8_0: ((0, "f16"),),
    GGMLType.Q8_1: ((0, "f16"), (2, "f16")),
    GGMLType.Q2_K: ((80, "f16"), (82, "f16")),
    GGMLType.Q3_K: ((108, "f16"),),
    GGMLType.Q4_K: ((0, "f16"), (2, "f16")),
    GGMLType.Q5_K: ((0, "f16"), (2, "f16")),
    GGMLType.Q6_K: ((208, "f16"),),
    GGMLType.Q8_K: ((0, "f32"),),
    GGMLType.IQ2_XXS: ((0, "f16"),),
    GGMLType.IQ2_XS: ((0, "f16"),),
    GGMLType.IQ3_XXS: ((0, "f16"),),
    GGMLType.IQ1_S: ((0, "f16"),),
    GGMLType.IQ4_NL: ((0, "f16"),),
    GGMLType.IQ3_S: ((0, "f16"),),
    GGMLType.IQ2_S: ((0, "f16"),),
    GGMLType.IQ4_XS: ((0, "f16"),),
    GGMLType.TQ1_0: ((52, "f16"),),
    GGMLType.TQ2_0: ((64, "f16"),),
    GGMLType.Q1_0: ((0, "f16"),),
    GGMLType.Q2_0: ((0, "f16"),),
}

SPECIAL_F16 = np.array(
    [0x0000, 0x8000, 0x7BFF, 0xFBFF, 0x0001, 0x8001, 0x03FF, 0x0400, 0x3C00,
     0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x7C01, 0xFD55, 0x7FFF],
    dtype=np.uint16,
)  # fmt: skip
SPECIAL_F32 = np.array(
    [0x00000000, 0x80000000, 0x7F7FFFFF, 0xFF7FFFFF, 0x00000001, 0x807FFFFF, 0x00800000,
     0x3F800000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FA55555],
    dtype=np.uint32,
)  # fmt: skip


def _sane_f16(rng: np.random.Generator, n: int) -> np.ndarray:
    mags = np.exp2(rng.uniform(-14, 0, n)) * rng.choice([-1.0, 1.0], n)
    return mags.astype(np.float16).view(np.uint16)


def _sane_f32(rng: np.random.Generator, n: int) -> np.ndarray:
    mags = np.exp2(rng.uniform(-30, 0, n)) * rng.choice([-1.0, 1.0], n)
    return mags.astype(np.float32).view(np.uint32)


def set_scales(
    blocks: np.ndarray, ggml_type: GGMLType, rng: np.random.Generator, special_fraction: float = 0.25
) -> np.ndarray:
    """Overwrite the scale fields: mostly sane magnitudes, some special values."""
    n = blocks.shape[0]
    for offset, kind in SCALE_FIELDS.get(ggml_type, ()):
        vals: np.ndarray
        specials: np.ndarray
        word: np.dtype
        if kind == "f16":
            vals, specials, word = _sane_f16(rng, n), SPECIAL_F16, np.dtype("<u2")
        else:
            vals, specials, word = _sane_f32(rng, n), SPECIAL_F32, np.dtype("<u4")
        pick = np.asarray(rng.random(n) < special_fraction)
        vals[pick] = rng.choice(specials, int(np.count_nonzero(pick)))
        blocks[:, offset : offset + word.itemsize].view(word)[:, 0] = vals
    return blocks


def random_blocks(
    ggml_type: GGMLType, n_blocks: int, rng: np.random.Generator, special_fraction: float = 0.25
) -> np.ndarray:
    """(n_blocks, type_size) random blocks with mixed sane and special scales."""
    size = TENSOR_TYPES[ggml_type].type_size
    blocks = rng.integers(0, 256, (n_blocks, size), dtype=np.uint8)
    return set_scales(blocks, ggml_type, rng, special_fraction)


def pattern_blocks(ggml_type: GGMLType, rng: np.random.Generator) -> np.ndarray:
    """256 blocks in which every byte position takes all 256 values (scales kept sane)."""
    size = TENSOR_TYPES[ggml_type].type_size
    blocks = ((np.arange(256)[:, None] + np.arange(size)[None, :]) % 256).astype(np.uint8)
    return set_scales(blocks, ggml_type, rng, special_fraction=0.0)


def _q8_1_via_q8_0(lib: object, blocks: np.ndarray, n_values: int) -> np.ndarray:
    # ggml has no Q8_1 dequantizer (Q8_1 only ever feeds dot products); its values are
    # d * qs exactly like Q8_0, so ggml's Q8_0 code on the (d, qs) part is the reference.
    q8_0 = np.concatenate([blocks[:, 0:2], blocks[:, 4:36]], axis=1)
    return lib.to_float(int(GGMLType.Q8_0), q8_0, n_values)  # type: ignore[attr-defined]


_SPECIAL_REFERENCES: dict[GGMLType, tuple[str, Callable[[object, np.ndarray, int], np.ndarray]]] = {
    GGMLType.Q8_1: ("ggml to_float of Q8_0 applied to each block's (d, qs)", _q8_1_via_q8_0),
}


def make(ggml_type: GGMLType, lib: object, seed: int) -> dict[str, np.ndarray]:
    from bench.ggml_ref import GGML

    assert isinstance(lib, GGML)
    info = TENSOR_TYPES[ggml_type]
    rng = np.random.default_rng([seed, int(ggml_type)])
    if info.block_size == 1 and info.type_size == 2:
        # Half floats: every one of the 65536 bit patterns.
        blocks = np.arange(1 << 16, dtype="<u2").view(np.uint8).reshape(-1, 2)
        how = lib.to_float_source(int(ggml_type))
        return {
            "blocks": blocks,
            "values": lib.to_float(int(ggml_type), blocks, 1 << 16),
            "how": np.array(how),
        }
    n_blocks = max(64, VALUES_PER_TYPE // info.block_size)
    parts = [pattern_blocks(ggml_type, rng)[: max(1, n_blocks // 2)]]
    if ggml_type is GGMLType.Q8_1:
        # Blocks from ggml's own quantizer, with a consistent s field.
        floats = rng.normal(0, 1, (n_blocks // 4) * info.block_size).astype(np.float32)
        made = np.frombuffer(lib.quantize_ref(int(ggml_type), floats), dtype=np.uint8)
        parts.append(made.reshape(-1, info.type_size))
    parts.append(random_blocks(ggml_type, n_blocks - sum(p.shape[0] for p in parts), rng))
    blocks = np.ascontiguousarray(np.concatenate(parts)[:n_blocks])
    n_values = n_blocks * info.block_size
    if lib.has_to_float(int(ggml_type)):
        how = lib.to_float_source(int(ggml_type))
        values = lib.to_float(int(ggml_type), blocks, n_values)
    elif ggml_type in _SPECIAL_REFERENCES:
        how, fn = _SPECIAL_REFERENCES[ggml_type]
        values = fn(lib, blocks, n_values)
    else:
        raise SystemExit(f"ggml has no dequantizer for {ggml_type.name}")
    return {"blocks": blocks, "values": values, "how": np.array(how)}


def _write_readme(out_dir: Path) -> None:
    rows = []
    for path in sorted(out_dir.glob("*.npz")):
        with np.load(path) as z:
            meta = json.loads(str(z["meta"]))
        rows.append(
            f"| {path.name} | {meta['n_blocks']} | {meta['library']} | {meta['seed']} | {meta['how']} |"
        )
    text = (
        f"""# Reference vectors from ggml's C code

Each `<TYPE>.npz` holds `blocks` (uint8, n_blocks x type_size, little-endian as in a GGUF
file), `values` (float32, what ggml's C dequantizer returned for them) and `meta` (JSON:
type, counts, seed, library, how, command). The tests compare `registry.quant.dequantize`
with `values` bit for bit (NaNs by bit pattern too).

Made by `tests/quant/refgen.py`:

    python -m tests.quant.refgen [TYPE ...]        # default: {" ".join(DEFAULT_TYPES)}

The other types' files were made by naming them (e.g. `python -m tests.quant.refgen Q2_0`
when its kernel was added); each file's meta keeps the command that made it.

run with the project venv, with libggml-base.so from llama-cpp-python (found under
the peer virtualenv (`make refvenv`) or site-packages, or named by $REGISTRY_GGML_LIB; see bench/ggml_ref.py).
Blocks: half are "pattern" blocks (byte j of block k is (j + k) mod 256, so every byte
position takes every value) and half random bytes; in both, scale fields get sane random
magnitudes, and in the random half a quarter get special values (+-0, subnormals, the
largest finite values, +-Inf, quiet and signalling NaNs with payloads). Q8_1 also gets
blocks made by ggml's own `quantize_row_q8_1_ref`. The generator is seeded (seed column),
so a rerun with the same library reproduces the files exactly.

| file | blocks | library | seed | reference |
|---|---|---|---|---|
"""
        + "\n".join(rows)
        + "\n"
    )
    (out_dir / "README.md").write_text(text)


def main(argv: list[str]) -> int:
    from bench.ggml_ref import GGMLUnavailable, library_version, load

    parser = argparse.ArgumentParser(
        prog="python -m tests.quant.refgen", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("types", nargs="*", default=list(DEFAULT_TYPES), help="ggml type names")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    args = parser.parse_args(argv)
    try:
        types = [GGMLType[name.upper()] for name in args.types]
    except KeyError as exc:
        parser.error(f"unknown type {exc}")
    try:
        lib = load()
    except GGMLUnavailable as exc:
        print(f"ggml unavailable: {exc}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    version = library_version(lib)
    for t in types:
        data = make(t, lib, args.seed)
        meta = {
            "type": t.name,
            "n_blocks": int(data["blocks"].shape[0]),
            "n_values": int(data["values"].size),
            "seed": args.seed,
            "library": version,
            "how": str(data["how"]),
            "command": "python -m tests.quant.refgen " + " ".join(args.types),
        }
        path = args.out / f"{t.name}.npz"
        np.savez_compressed(
            path, blocks=data["blocks"], values=data["values"], meta=np.array(json.dumps(meta))
        )
        print(f"{path} {path.stat().st_size} bytes")
    _write_readme(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
