"""`registry inspect` run as a real command in a subprocess, on real and broken files."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from registry import cli
from tests.gguf.gguf_py import gguf_reader, write_gguf

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str | Path, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")} | (extra_env or {})
    return subprocess.run(
        [sys.executable, "-m", "registry.cli", "inspect", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )


def test_text_summary(smollm2_path: Path) -> None:
    r = run(smollm2_path)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    lines = {line.split(None, 1)[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert "llama" in lines["architecture"]
    assert "135M, 134,515,008 parameters" in out
    assert "Q4_1, 5.74 bits per weight" in out
    assert "8,192 tokens" in out
    assert "gpt2 (pre: smollm), 49,152 tokens" in out
    template = gguf_reader(smollm2_path).fields["tokenizer.chat_template"].contents()
    assert hashlib.sha256(template.encode()).hexdigest() in out
    # the quant mix table: type, tensors, elements, bytes
    assert "quant mix" in out
    assert any(line.split()[:2] == ["Q4_1", "210"] for line in out.splitlines())
    assert "tensors (" not in out  # only with --tensors
    assert r.stderr == ""


def test_json(gemma3_path: Path) -> None:
    r = run(gemma3_path, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    ref = gguf_reader(gemma3_path)
    assert doc["architecture"] == "gemma3"
    assert doc["name"] == "Gemma 3 270m"
    assert doc["size_label"] == "270M"
    assert doc["parameter_count"] == sum(int(t.n_elements) for t in ref.tensors)
    assert doc["license"] == "gemma"
    assert doc["file_type"] == "Q4_K_M"
    mix: dict[str, dict[str, int]] = {}
    for t in ref.tensors:
        e = mix.setdefault(t.tensor_type.name, {"tensors": 0, "elements": 0, "bytes": 0})
        e["tensors"] += 1
        e["elements"] += int(t.n_elements)
        e["bytes"] += int(t.n_bytes)
    assert doc["quant_mix"] == mix
    total_bytes = sum(e["bytes"] for e in mix.values())
    assert doc["bits_per_weight"] == pytest.approx(total_bytes * 8 / doc["parameter_count"])
    assert (doc["context_length"], doc["embedding_length"], doc["block_count"]) == (32768, 640, 18)
    assert (doc["head_count"], doc["head_count_kv"], doc["expert_count"]) == (4, 1, None)
    assert (doc["tokenizer_model"], doc["vocab_size"]) == ("llama", 262144)
    assert doc["chat_template_sha256"] is None
    assert doc["base_models"] == []
    assert (doc["gguf_version"], doc["endianness"], doc["alignment"]) == (3, "little", 32)
    assert (doc["tensor_count"], doc["kv_count"]) == (len(ref.tensors), 33)
    assert doc["header_bytes"] == ref.data_offset
    assert doc["file_size"] == gemma3_path.stat().st_size
    assert doc["split"] is None
    assert "tensors" not in doc
    assert doc["chat_template_findings"] == []  # no template: nothing to find


def test_the_kv_cache_is_sized_at_the_context_asked_for(gemma3_path: Path) -> None:
    r = run(gemma3_path, "--context", "8K")
    assert r.returncode == 0, r.stderr
    [line] = [x for x in r.stdout.splitlines() if x.strip().startswith("KV cache")]
    # 8,192 x 3 KiB for the 3 full layers, 512 x 15 KiB for the 15 sliding ones: 31.5 MiB
    assert line.endswith("15.0 KiB per token; 31.5 MiB at 8,192 tokens; 103.5 MiB at 32,768 tokens"), line
    doc = json.loads(run(gemma3_path, "--json", "--context", "1000").stdout)
    assert doc["kv_cache"]["at_context"] == {"tokens": 1000, "bytes": 1000 * 3072 + 512 * 15360}
    assert doc["kv_cache"]["at_context_length"] == 32768 * 3072 + 512 * 15360
    for bad in ("0", "8G", "-5", "k"):
        r = run(gemma3_path, "--context", bad)
        assert r.returncode == 2 and "not a token count" in r.stderr, (bad, r.stderr)


def test_json_tensors(smollm2_path: Path) -> None:
    r = run(smollm2_path, "--json", "--tensors")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    ref = gguf_reader(smollm2_path)
    assert len(doc["tensors"]) == len(ref.tensors) == 272
    for got, t in zip(doc["tensors"], ref.tensors, strict=True):
        assert got == {
            "name": t.name,
            "type": t.tensor_type.name,
            "shape": [int(d) for d in t.shape],
            "offset": int(t.data_offset),
            "n_bytes": int(t.n_bytes),
        }


def test_text_tensors(gemma3_path: Path) -> None:
    r = run(gemma3_path, "--tensors")
    assert r.returncode == 0, r.stderr
    first = gguf_reader(gemma3_path).tensors[0]
    assert "tensors (236)" in r.stdout
    row = next(line.split() for line in r.stdout.splitlines() if line.split()[:1] == [first.name])
    assert row[1] == first.tensor_type.name
    assert row[2] == "x".join(str(int(d)) for d in first.shape)
    assert row[3] == f"{int(first.n_bytes):,}" and row[4] == f"{int(first.data_offset):,}"


def test_split_model(tmp_path: Path) -> None:
    tensors = [(f"blk.{i}.w", np.ones((4, 32), dtype=np.float32)) for i in range(5)]
    paths = write_gguf(
        tmp_path / "m.gguf", kv={"general.name": "Split"}, tensors=tensors, split_max_tensors=2
    )
    r = run(paths[1], "--json", "--tensors")  # any shard names the whole artifact
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["split"] == {"no": 0, "count": 3, "tensors_count": 5}
    assert doc["name"] == "Split" and doc["parameter_count"] == 5 * 4 * 32
    assert [f["path"] for f in doc["files"]] == [str(p) for p in paths]
    assert doc["file_size"] == sum(p.stat().st_size for p in paths)
    assert [t["shard"] for t in doc["tensors"]] == [1, 1, 2, 2, 3]
    text = run(paths[0])
    assert text.returncode == 0 and "3 shards, 5 tensors in all" in text.stdout

    paths[2].unlink()
    missing = run(paths[0])
    assert missing.returncode == 1
    assert "shards missing" in missing.stderr and paths[2].name in missing.stderr


def _assert_clean_failure(r: subprocess.CompletedProcess[str], code: str) -> None:
    assert r.returncode == 1
    assert "Traceback" not in r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f": {code}: " in lines[0]


def test_corrupted_file(tmp_path: Path, smollm2_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    head = bytearray(smollm2_path.read_bytes()[:4096])
    head[0:4] = b"GGUX"
    bad.write_bytes(bytes(head))
    r = run(bad)
    _assert_clean_failure(r, "bad_magic")
    assert r.stdout == ""

    r = run(bad, "--json")
    _assert_clean_failure(r, "bad_magic")
    err = json.loads(r.stdout)["error"]
    assert err["code"] == "bad_magic" and err["offset"] == 0 and err["message"]
    assert set(err) == {"code", "message", "field", "offset"}


def test_truncated_file(tmp_path: Path, gemma3_path: Path) -> None:
    cut = tmp_path / "cut.gguf"
    with gemma3_path.open("rb") as f:
        cut.write_bytes(f.read(1_000_000))  # ends inside the vocabulary
    r = run(cut, "--json")
    assert r.returncode == 1 and "Traceback" not in r.stdout + r.stderr
    err = json.loads(r.stdout)["error"]
    assert err["code"] in ("truncated", "past_end_of_file")
    assert err["field"] is not None


def test_tensor_data_missing(tmp_path: Path, smollm2_path: Path) -> None:
    # The whole header is there but the file stops before the tensor data ends.
    short = tmp_path / "short.gguf"
    with smollm2_path.open("rb") as f:
        short.write_bytes(f.read(2_000_000))
    r = run(short)
    assert r.returncode == 1 and "Traceback" not in r.stdout + r.stderr
    assert "past_end_of_file" in r.stderr or "truncated" in r.stderr


@pytest.mark.parametrize(
    ("target", "needle"),
    [
        ("/nonexistent/model.gguf", "no such file"),
        # Remote files are read by range requests now; nothing listens on port 9.
        ("http://127.0.0.1:9/org/repo/resolve/main/m.gguf", "connection_error"),
    ],
)
def test_missing_path_and_url(target: str, needle: str) -> None:
    r = run(target, extra_env={"REGISTRY_HUB_MAX_ATTEMPTS": "1"})
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr


def test_directory(tmp_path: Path) -> None:
    r = run(tmp_path)
    _assert_clean_failure(r, "read_error")


def test_unexpected_exception_is_one_line(
    smollm2_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A bug below the CLI (here: a stand-in for one) still ends as one line, not a traceback.
    import registry.gguf.facts

    def broken(*args: object, **kwargs: object) -> None:
        raise ValueError("boom")

    monkeypatch.setattr(registry.gguf.facts, "derive_facts", broken)
    assert cli.main(["inspect", str(smollm2_path), "--json"]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out) == {
        "error": {"code": "internal_error", "message": "ValueError: boom", "field": None, "offset": None}
    }
    assert err.strip() == f"registry: inspect: {smollm2_path}: internal_error: ValueError: boom"


def test_non_ascii_metadata_on_an_ascii_terminal(tmp_path: Path) -> None:
    name = "Modèle 日本"
    (path,) = write_gguf(
        tmp_path / "u.gguf", kv={"general.name": name}, tensors=[("w", np.ones((2, 32), np.float32))]
    )
    ascii_only = {"PYTHONIOENCODING": "ascii"}
    text = run(path, extra_env=ascii_only)
    assert text.returncode == 0, text.stderr
    assert "Mod?le ??" in text.stdout
    js = run(path, "--json", extra_env=ascii_only)
    assert js.returncode == 0, js.stderr
    assert json.loads(js.stdout)["name"] == name


def test_text_lineage_experts_and_templates(tmp_path: Path) -> None:
    kv = {
        "general.name": "Tiny MoE",
        "general.base_model.count": 2,
        "general.base_model.0.name": "Mixtral 8x7B v0.1",
        "general.base_model.0.repo_url": "https://huggingface.co/mistralai/Mixtral-8x7B-v0.1",
        "general.base_model.1.name": "Other",
        "llama.expert_count": 8,
        "llama.expert_used_count": 2,
        "tokenizer.chat_template": "{{x}}",
        "tokenizer.chat_template.rag": "{{y}}",
    }
    tensors = [
        ("blk.0.ffn_up_exps.weight", np.ones((8, 64, 32), np.float32)),
        ("output.weight", np.ones((4, 32), np.float32)),
    ]
    (path,) = write_gguf(tmp_path / "moe.gguf", kv=kv, tensors=tensors)
    r = run(path)
    assert r.returncode == 0, r.stderr
    # "  label  value" lines; continuation lines have an empty label
    rows = [
        re.split(r"\s{2,}", line[2:], maxsplit=1) for line in r.stdout.splitlines() if line.startswith("  ")
    ]
    # 4x32 shared + one expert's 64x32: 2.2K, and 8 experts
    assert ["size", "8x2.2K (computed), 16,512 parameters"] in rows
    assert ["experts", "8, 2 used per token"] in rows
    sha = hashlib.sha256(b"{{x}}").hexdigest()
    assert ["chat template", f"sha256 {sha} (5 chars)"] in rows
    assert ["", "+ named template 'rag'"] in rows
    base = (
        "mistralai/Mixtral-8x7B-v0.1  (Mixtral 8x7B v0.1, https://huggingface.co/mistralai/Mixtral-8x7B-v0.1)"
    )
    assert ["base model", base] in rows
    assert ["", "Other"] in rows


def test_help_and_a_local_inspect_load_neither_the_catalog_nor_the_http_client(smollm2_path: Path) -> None:
    # Every command builds the whole parser; `inspect` of a local file needs no database and
    # no network. Loading SQLAlchemy and aiohttp there had cost each call ~1 s of start-up.
    probe = (
        "import sys\n"
        "from registry import cli\n"
        "cli.build_parser()\n"
        "parser_loads = sorted(m for m in ('sqlalchemy', 'aiohttp') if m in sys.modules)\n"
        "code = cli.main(['inspect', sys.argv[1]])\n"
        "inspect_loads = sorted(m for m in ('sqlalchemy', 'aiohttp') if m in sys.modules)\n"
        "print('PROBE', code, parser_loads, inspect_loads)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    r = subprocess.run([sys.executable, "-c", probe, str(smollm2_path)], capture_output=True, text=True,
                       cwd=ROOT, env=env, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "135M, 134,515,008 parameters" in r.stdout
    assert r.stdout.splitlines()[-1] == "PROBE 0 [] []"


def test_the_tree_depth_bound_is_the_catalogs() -> None:
    from registry.catalog import lineage

    parser, _ = cli.build_parser()
    assert parser.parse_args(["tree", "a/b", "--depth", str(lineage.MAX_DEPTH)]).depth == lineage.MAX_DEPTH
    with pytest.raises(SystemExit):
        parser.parse_args(["tree", "a/b", "--depth", str(lineage.MAX_DEPTH + 1)])
