"""Tiny random models of every supported architecture against a float64 reference."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from registry.runner import (
    BadMetadata,
    MissingKey,
    MissingTensor,
    ModelFile,
    NonFiniteLogits,
    Transformer,
    UnsupportedArchitecture,
    greedy_generate,
    load_model,
    perplexity,
)
from tests.runner import reference64
from tests.runner.reference64 import Spec
from tests.runner.synthetic import make_weights, write_gguf

TOKENS = [3, 17, 42, 5, 5, 90, 1, 64, 33, 7, 12]

SPECS = {
    "llama": lambda: Spec("llama"),
    "llama_partial_rope_tied": lambda: Spec("llama", n_rot=4, tied=True, n_head_kv=1),
    "gemma3": lambda: Spec("gemma3", n_layer=7, rope_base=1e6, tied=True, eps=1e-6),
    "gemma3_softcap": lambda: Spec("gemma3", n_layer=7, tied=True, softcap=5.0, head_dim=16, n_head_kv=1),
    "qwen2": lambda: Spec("qwen2"),
    "qwen3": lambda: Spec("qwen3", head_dim=16),
}


def _load(path: Path, *, ggml_rounding: bool = False) -> Transformer:
    return load_model(ModelFile.from_buffer(np.memmap(path, mode="r")), ggml_rounding=ggml_rounding)


def _build(
    name: str, tmp_path: Path, dtype: type[np.floating] = np.float32, seed: int = 0
) -> tuple[Spec, Path]:
    spec = SPECS[name]()
    make_weights(spec, np.random.default_rng(seed), dtype)
    return spec, write_gguf(spec, tmp_path / f"{name}.gguf")


@pytest.mark.parametrize("name", sorted(SPECS))
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
def test_logits_match_float64_reference(name: str, dtype: type[np.floating], tmp_path: Path) -> None:
    spec, path = _build(name, tmp_path, dtype)
    model = _load(path)
    ours = model.forward(TOKENS, model.new_cache(32), all_logits=True)
    ref = reference64.logits(spec, TOKENS)
    assert ours.shape == ref.shape == (len(TOKENS), spec.n_vocab)
    np.testing.assert_allclose(ours, ref, rtol=2e-4, atol=2e-4 * np.abs(ref).max())


def _weight_matrices(spec: Spec) -> int:
    return 7 * spec.n_layer + (1 if spec.tied else 2)


@pytest.mark.parametrize("name", sorted(SPECS))
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
def test_kept_quantized_matrices_match_float64_reference(name: str, dtype: type[np.floating], tmp_path: Path) -> None:
    spec, path = _build(name, tmp_path, dtype)
    mf = ModelFile.from_buffer(np.memmap(path, mode="r"))
    model = load_model(mf, ggml_rounding=False, max_weight_bytes=0)
    assert model.kept_matrices == _weight_matrices(spec)
    ours = model.forward(TOKENS, model.new_cache(32), all_logits=True)
    ref = reference64.logits(spec, TOKENS)
    np.testing.assert_allclose(ours, ref, rtol=2e-4, atol=2e-4 * np.abs(ref).max())
    # decoding one token at a time looks its embedding row up in the quantized bytes
    cache = model.new_cache(32)
    steps = [model.forward(TOKENS[:3], cache, all_logits=True)] + [model.forward([t], cache) for t in TOKENS[3:]]
    np.testing.assert_allclose(np.concatenate(steps), ours, rtol=1e-4, atol=1e-4)
    assert mf.float32_budget is None  # the budget is load_model's, not left on the file


@pytest.mark.parametrize("budget", [None, 0], ids=["float32", "kept"])
def test_a_big_endian_file_runs_like_its_reference(budget: int | None, tmp_path: Path) -> None:
    spec = SPECS["gemma3"]()
    make_weights(spec, np.random.default_rng(3), np.float16)
    path = write_gguf(spec, tmp_path / "be.gguf", big_endian=True)
    mf = ModelFile.from_buffer(np.memmap(path, mode="r"))
    assert mf.header.endianness == "big"
    model = load_model(mf, ggml_rounding=False, max_weight_bytes=budget)
    assert model.kept_matrices == (0 if budget is None else _weight_matrices(spec))
    ours = model.forward(TOKENS, model.new_cache(32), all_logits=True)
    ref = reference64.logits(spec, TOKENS)
    np.testing.assert_allclose(ours, ref, rtol=2e-4, atol=2e-4 * np.abs(ref).max())


def test_a_negative_weight_budget_is_refused(tmp_path: Path) -> None:
    _, path = _build("llama", tmp_path)
    with pytest.raises(ValueError, match="max_weight_bytes"):
        load_model(ModelFile.from_buffer(np.memmap(path, mode="r")), max_weight_bytes=-1)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_kv_cache_decode_equals_full_pass(name: str, tmp_path: Path) -> None:
    _, path = _build(name, tmp_path, seed=1)
    model = _load(path, ggml_rounding=True)
    full = model.forward(TOKENS, model.new_cache(32), all_logits=True)
    cache = model.new_cache(32)
    first = model.forward(TOKENS[:4], cache, all_logits=True)
    steps = [model.forward([t], cache) for t in TOKENS[4:]]
    np.testing.assert_allclose(np.concatenate([first, *steps]), full, rtol=1e-4, atol=1e-4)


def test_ggml_rounding_stays_close_to_reference(tmp_path: Path) -> None:
    spec, path = _build("gemma3", tmp_path, np.float16)
    ours = _load(path, ggml_rounding=True).forward(TOKENS, _load(path).new_cache(32), all_logits=True)
    ref = reference64.logits(spec, TOKENS)
    np.testing.assert_allclose(ours, ref, rtol=0.02, atol=0.02 * np.abs(ref).max())


def test_smoke_helpers_on_synthetic_model(tmp_path: Path) -> None:
    spec, path = _build("llama", tmp_path)
    model = _load(path)
    ref = reference64.logits(spec, TOKENS)
    gen = greedy_generate(model, TOKENS[:3], 4)
    assert gen[0] == int(np.argmax(ref[2]))
    assert len(gen) == 4
    lp = ref - ref.max(axis=1, keepdims=True)
    lp -= np.log(np.exp(lp).sum(axis=1, keepdims=True))
    expected = np.exp(-np.mean([lp[i, TOKENS[i + 1]] for i in range(len(TOKENS) - 1)]))
    assert perplexity(model, TOKENS) == pytest.approx(expected, rel=1e-4)


def test_non_finite_logits_are_reported(tmp_path: Path) -> None:
    _, path = _build("llama", tmp_path)
    model = _load(path)
    model.layers[1].w_down.groups[0][0][:, 0] = np.nan
    with pytest.raises(NonFiniteLogits) as exc:
        perplexity(model, TOKENS)
    assert exc.value.position == 0
    with pytest.raises(NonFiniteLogits):
        greedy_generate(model, TOKENS[:2], 3)


@pytest.mark.parametrize(
    "key", ["llama.embedding_length", "llama.attention.head_count", "llama.attention.layer_norm_rms_epsilon"]
)
def test_missing_key_is_named(key: str, tmp_path: Path) -> None:
    spec = Spec("llama")
    make_weights(spec, np.random.default_rng(0), np.float32)
    path = write_gguf(spec, tmp_path / "m.gguf", skip_keys=(key,))
    with pytest.raises(MissingKey) as exc:
        _load(path)
    assert exc.value.key == key


def test_missing_sliding_window_is_named(tmp_path: Path) -> None:
    spec = Spec("gemma3", n_layer=1, tied=True)
    make_weights(spec, np.random.default_rng(0), np.float32)
    path = write_gguf(spec, tmp_path / "m.gguf", skip_keys=("gemma3.attention.sliding_window",))
    with pytest.raises(MissingKey, match=r"gemma3\.attention\.sliding_window"):
        _load(path)


def test_missing_tensor_is_named(tmp_path: Path) -> None:
    spec = Spec("qwen2", n_layer=1)
    make_weights(spec, np.random.default_rng(0), np.float32)
    del spec.weights["blk.0.attn_k.bias"]
    with pytest.raises(MissingTensor, match=r"blk\.0\.attn_k\.bias"):
        _load(write_gguf(spec, tmp_path / "m.gguf"))


def test_unsupported_architecture(tmp_path: Path) -> None:
    spec = Spec("llama", n_layer=1)
    make_weights(spec, np.random.default_rng(0), np.float32)
    spec.arch = "mamba"
    with pytest.raises(UnsupportedArchitecture, match="mamba"):
        _load(write_gguf(spec, tmp_path / "m.gguf"))


def test_truncated_file_is_a_parser_error(tmp_path: Path) -> None:
    from registry.gguf.errors import GGUFError

    _, path = _build("llama", tmp_path)
    data = path.read_bytes()
    with pytest.raises(GGUFError):
        ModelFile.from_buffer(data[:200])


def test_tensor_data_past_the_end_is_reported(tmp_path: Path) -> None:
    from registry.runner import BadTensor

    _, path = _build("llama", tmp_path)
    data = path.read_bytes()
    mf = ModelFile.from_buffer(data)
    cut = ModelFile(mf.header, np.frombuffer(data[:-64], dtype=np.uint8))
    with pytest.raises(BadTensor):
        load_model(cut)


def test_perplexity_beyond_float_range_is_infinite(tmp_path: Path) -> None:
    spec = Spec("llama")
    make_weights(spec, np.random.default_rng(0), np.float32)
    spec.weights["output.weight"] *= 1e6  # finite logits millions apart: NLL far above 709 nats
    model = _load(write_gguf(spec, tmp_path / "m.gguf"))
    assert perplexity(model, TOKENS) == math.inf


@pytest.mark.parametrize("value", ["thirty", [30.0, 30.0]], ids=["string", "array"])
def test_softcap_that_is_not_a_number_is_bad_metadata(value: object, tmp_path: Path) -> None:
    spec = Spec("gemma3", n_layer=1, tied=True)
    make_weights(spec, np.random.default_rng(0), np.float32)
    path = write_gguf(spec, tmp_path / "m.gguf", extra={"gemma3.final_logit_softcapping": value})
    with pytest.raises(BadMetadata) as exc:
        _load(path)
    assert exc.value.key == "gemma3.final_logit_softcapping"


@pytest.mark.parametrize(
    ("arch", "key", "value"),
    [
        ("llama", "rope.freq_base", 0.0),
        ("llama", "rope.freq_base", -10000.0),
        ("llama", "rope.freq_base", math.nan),
        ("llama", "rope.freq_base", math.inf),
        ("llama", "attention.layer_norm_rms_epsilon", math.nan),
        ("llama", "attention.layer_norm_rms_epsilon", -1.0),
        ("gemma3", "rope.freq_base_swa", 0.0),
        ("gemma3", "rope.freq_base_swa", math.nan),
        ("gemma3", "final_logit_softcapping", math.nan),
        ("gemma3", "attention.sliding_window", 0),
        ("llama", "rope.scaling.factor", -4.0),
        ("llama", "rope.scaling.type", ["linear"]),
    ],
)
def test_hyper_parameter_out_of_range_is_bad_metadata(
    arch: str, key: str, value: object, tmp_path: Path
) -> None:
    # Each loaded, then made the logits NaN (a verdict blaming the weights) or, for an
    # infinite base, turned rope off.
    spec = Spec(arch, n_layer=1, tied=arch == "gemma3")
    make_weights(spec, np.random.default_rng(0), np.float32)
    path = write_gguf(spec, tmp_path / "m.gguf", extra={f"{arch}.{key}": value})
    with pytest.raises(BadMetadata) as exc:
        _load(path)
    assert exc.value.key == f"{arch}.{key}"


def test_bad_metadata_message_does_not_carry_a_huge_value(tmp_path: Path) -> None:
    # The message goes into the verification row: a 16 MiB string must not come with it.
    spec = Spec("llama", n_layer=1)
    make_weights(spec, np.random.default_rng(0), np.float32)
    path = write_gguf(spec, tmp_path / "m.gguf", extra={"llama.embedding_length": "9" * 100_000})
    with pytest.raises(BadMetadata) as exc:
        _load(path)
    assert exc.value.key == "llama.embedding_length" and len(str(exc.value)) < 200


def _scaled(tmp_path: Path, spec: Spec, extra: dict[str, object]) -> tuple[np.ndarray, np.ndarray]:
    """Our logits for `spec` written with the rope scaling keys `extra`, and the reference's."""
    make_weights(spec, np.random.default_rng(0), np.float32)
    model = _load(write_gguf(spec, tmp_path / "m.gguf", extra=extra))
    return model.forward(TOKENS, model.new_cache(32), all_logits=True), reference64.logits(spec, TOKENS)


@pytest.mark.parametrize(
    ("arch", "extra"),
    [
        ("llama", {"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 4.0}),
        # llama.cpp's defaults: no type is linear, and the factor may be under its old key.
        ("llama", {"llama.rope.scaling.factor": 4.0}),
        ("llama", {"llama.rope.scale_linear": 4.0}),
        ("qwen2", {"qwen2.rope.scaling.factor": 4.0}),
        # Gemma 3 scales its global layers only.
        ("gemma3", {"gemma3.rope.scaling.type": "linear", "gemma3.rope.scaling.factor": 4.0}),
    ],
    ids=["linear", "no-type", "old-key", "qwen2-no-type", "gemma3-linear"],
)
def test_linear_rope_scaling_matches_reference(arch: str, extra: dict[str, object], tmp_path: Path) -> None:
    spec = Spec(arch, n_layer=7 if arch == "gemma3" else 2, tied=arch == "gemma3", rope_scale=0.25)
    ours, ref = _scaled(tmp_path, spec, extra)
    np.testing.assert_allclose(ours, ref, rtol=2e-4, atol=2e-4 * np.abs(ref).max())


@pytest.mark.parametrize(
    "extra",
    [
        {"llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": 1.0},
        {"llama.rope.scaling.type": "yarn"},
        {"llama.rope.scaling.type": "longrope", "llama.rope.scaling.factor": 0.0},
        {"llama.rope.scaling.type": "none", "llama.rope.scaling.factor": 4.0},
        {"llama.rope.scaling.type": "linear", "llama.rope.scaling.attn_factor": 1.0},
    ],
    ids=["yarn-factor-1", "yarn-no-factor", "longrope-factor-0", "none-factor-4", "attn-factor-1"],
)
def test_rope_scaling_that_changes_nothing_runs_unscaled(extra: dict[str, object], tmp_path: Path) -> None:
    ours, ref = _scaled(tmp_path, Spec("llama"), extra)
    np.testing.assert_allclose(ours, ref, rtol=2e-4, atol=2e-4 * np.abs(ref).max())


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": 4.0}, "'yarn' rope scaling"),
        ({"llama.rope.scaling.type": "longrope", "llama.rope.scaling.factor": 2.0}, "'longrope'"),
        ({"llama.rope.scaling.type": "y" * 100_000, "llama.rope.scaling.factor": 2.0}, "an unknown rope"),
        ({"llama.rope.scaling.type": "linear", "llama.rope.scaling.attn_factor": 2.0}, "attention factor"),
    ],
    ids=["yarn", "longrope", "unknown-long", "attn-factor"],
)
def test_rope_scaling_the_runner_lacks_is_unsupported(
    extra: dict[str, object], named: str, tmp_path: Path
) -> None:
    # Ignored, it made logits llama.cpp does not compute: a good file could fail on perplexity.
    spec = Spec("llama", n_layer=1)
    make_weights(spec, np.random.default_rng(0), np.float32)
    with pytest.raises(UnsupportedArchitecture) as exc:
        _load(write_gguf(spec, tmp_path / "m.gguf", extra=extra))
    assert named in str(exc.value) and len(str(exc.value)) < 200
