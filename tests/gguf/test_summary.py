"""The text summary of `registry inspect`, on files written with gguf-py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from registry.gguf.facts import derive_facts
from registry.gguf.facts_model import BaseModel, Facts
from registry.gguf.summary import facts_from_json, facts_text
from registry.hub.local import read_artifact_headers
from tests.gguf.gguf_py import parse_file, write_gguf

# Cursor up and erase line, twice: on a terminal this wipes the line above the tags.
_ERASE_ABOVE = "\x1b[1A\x1b[2K" * 2


def test_control_characters_from_the_file_are_shown_escaped(tmp_path: Path) -> None:
    kv = {
        "general.name": "evil\x1b]52;c;cHduZWQ=\x07",  # OSC 52: set the clipboard
        "general.tags": [f"ok{_ERASE_ABOVE}template safety  clean", "two\nlines\x9b"],
        "tokenizer.chat_template": "{{ messages }}",
    }
    tensors = [("w\x1b[31m", np.zeros((4, 32), dtype=np.float32))]
    (path,) = write_gguf(tmp_path / "evil.gguf", kv=kv, tensors=tensors)
    header = parse_file(path)
    findings = [{"severity": "critical", "code": "dunder-attribute", "message": "bad"}]
    text = facts_text(derive_facts([header]), [header], tensors=True, template_findings=findings)

    assert not any(c in text for c in "\x1b\x07\x9b")
    lines = text.splitlines()
    assert "  name             evil\\x1b]52;c;cHduZWQ=\\x07" in lines
    erase = "\\x1b[1A\\x1b[2K" * 2
    assert f"  tags             ok{erase}template safety  clean, two\\x0alines\\x9b" in lines
    assert any(line.startswith("  template safety  CRITICAL: dunder-attribute") for line in lines)
    assert any(line.startswith("  w\\x1b[31m  F32") for line in lines)


def _as_stored(facts: Facts) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The facts as a catalog page gives them back: JSON, the quant mix as its own list."""
    from registry.catalog.services import storable

    data = json.loads(json.dumps(storable(facts.to_dict())))
    mix = [{"tensor_type": name, **entry} for name, entry in data.pop("quant_mix").items()]
    return data, mix


def test_facts_come_back_from_their_json_as_they_were(tmp_path: Path, smollm2_path: Path, gemma3_path: Path) -> None:
    kv = {
        "general.name": "Made Up", "general.base_model.count": 1, "general.base_model.0.name": "Base",
        "general.base_model.0.repo_url": "https://huggingface.co/org/base", "general.tags": ["a", "b"],
        "tokenizer.chat_template": "{{ messages }}", "tokenizer.chat_template.tool_use": "{{ tools }}",
        "llama.context_length": 4096, "llama.block_count": 2, "llama.embedding_length": 64,
        "llama.attention.head_count": 4, "llama.attention.head_count_kv": 2,
    }  # fmt: skip
    tensors = [(f"t{i}", np.zeros((4, 32), dtype=np.float32)) for i in range(3)]
    split = write_gguf(tmp_path / "made-up.gguf", kv=kv, tensors=tensors, split_max_tensors=2)
    assert len(split) == 2
    cases = [
        [read_artifact_headers(str(smollm2_path))[0].header],
        [read_artifact_headers(str(gemma3_path))[0].header],
        [parse_file(p) for p in split],
    ]
    for headers in cases:
        facts = derive_facts(headers)
        data, mix = _as_stored(facts)
        back = facts_from_json(data, quant_mix=mix, chat_template=data["chat_template"],
                               chat_templates=data["chat_templates"])  # fmt: skip
        assert back == facts
        assert facts_text(back, []) == facts_text(facts, [])
    assert facts.base_models[0].repo_id == "org/base" and facts.split is not None and facts.chat_templates


def test_facts_stored_in_other_shapes_keep_their_defaults() -> None:
    """What an older release stored, or a value cut short: the field falls back, nothing raises."""
    odd = {
        "architecture": 7, "parameter_count": "many", "bits_per_weight": "nan", "context_length": True,
        "rope": ["freq_base"], "tags": "one", "languages": ["en", 3], "base_models": [{"name": 5}, "x", {"repo_id": "a/b"}],
        "kv_cache": {"layers": "x"}, "split": {"no": 0}, "modalities": None, "unknown_key": 1,
        "block_count": 2**70, "vocab_size": 1.5,
    }  # fmt: skip
    facts = facts_from_json(odd, quant_mix=[{"tensor_type": "Q4_K", "tensors": "1"}, {"tensors": 1}, 3],  # type: ignore[list-item]
                            chat_template=["x"], chat_templates="x")  # fmt: skip
    default = Facts()
    assert facts.architecture is None and facts.parameter_count == 0 and facts.bits_per_weight is None
    assert facts.context_length is None and facts.rope == {} and facts.tags == default.tags
    assert facts.languages == ("en",) and facts.block_count == 2**70 and facts.vocab_size is None
    assert facts.base_models == (BaseModel(), BaseModel(repo_id="a/b"))
    assert facts.kv_cache is None and facts.split is None and facts.modalities == {}
    assert facts.quant_mix == {} and facts.chat_template is None and facts.chat_templates == {}
    facts_text(facts, [])  # renders
    assert facts_from_json({}) == default
