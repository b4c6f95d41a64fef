"""`registry run tokenize | perplexity | generate` against llama.cpp's numbers for SmolLM2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from registry.cli import main
from tests.runner.conftest import reference


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_tokenize_equals_llama_cpp(smollm2_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = reference("smollm2")["tokenize"]["english"]
    doc = _json(capsys, ["run", "tokenize", str(smollm2_path), "--text", case["text"], "--json"])
    assert doc == {"tokens": case["ids"]}


def test_tokenize_adds_bos_when_the_model_does(gemma3_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = reference("gemma3")["tokenize"]["english"]
    doc = _json(capsys, ["run", "tokenize", str(gemma3_path), "--text", case["text"], "--json"])
    assert doc["tokens"] == case["ids"]
    assert doc["tokens"][0] == 2  # gemma's <bos>


def test_perplexity_within_3_percent_of_llama_cpp(
    smollm2_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case = reference("smollm2")["perplexity"]["story"]
    text = tmp_path / "story.txt"
    text.write_text(case["text"], encoding="utf-8")
    doc = _json(capsys, ["run", "perplexity", str(smollm2_path), "--text-file", str(text), "--json"])
    assert doc["tokens"] == len(case["tokens"])
    assert doc["perplexity"] == pytest.approx(case["perplexity"], rel=0.03)


def test_generate_equals_llama_cpp_greedy(smollm2_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = reference("smollm2")["greedy"]["capital"]
    argv = ["run", "generate", str(smollm2_path), "--prompt", case["prompt"], "-n", "8", "--json"]
    doc = _json(capsys, argv)
    assert doc["tokens"] == case["greedy"]
    assert doc["text"].startswith(" Paris")
    assert doc["tokens_per_second"] > 0
    assert doc["kept_matrices"] == 0  # this machine holds its 538 MB of float32 weights


def test_generate_with_weights_kept_quantized(smollm2_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = reference("smollm2")["greedy"]["capital"]
    argv = ["run", "generate", str(smollm2_path), "--prompt", case["prompt"], "-n", "8", "--float32-weights", "0"]
    doc = _json(capsys, [*argv, "--json"])
    assert doc["tokens"] == case["greedy"]
    assert doc["kept_matrices"] == 7 * 30 + 1  # every weight matrix: q k v o gate up down, tied embeddings
    # in text, the slower path is said on stderr; a budget that holds the first matrices keeps fewer
    assert main([*argv[:-1], "100MB"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(" Paris")
    kept = int(err.split("registry: run: ")[1].split()[0])
    assert 0 < kept < 7 * 30 + 1 and "above 100,000,000 bytes" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "tokenize", "{missing}", "--text", "x"],
        ["run", "perplexity", "{model}", "--text-file", "{missing}"],
        ["run", "generate", "{notgguf}", "--prompt", "x"],
        ["run", "perplexity", "{model}", "--text-file", "{one_token}"],
        ["run", "generate", "{model}", "--prompt", "x", "-n", "10000000000"],  # no memory for its cache
    ],
)
def test_errors_are_one_line(
    argv: list[str], smollm2_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "notgguf.gguf").write_bytes(b"not a gguf file at all")
    (tmp_path / "one.txt").write_text("Hi", encoding="utf-8")
    paths = {
        "missing": str(tmp_path / "missing"),
        "model": str(smollm2_path),
        "notgguf": str(tmp_path / "notgguf.gguf"),
        "one_token": str(tmp_path / "one.txt"),
    }
    assert main([a.format(**paths) for a in argv]) == 1
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.count("\n") == 1 and out.err.startswith("registry: run ")
    assert "Traceback" not in out.err
