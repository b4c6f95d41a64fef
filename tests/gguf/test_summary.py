"""The text summary of `registry inspect`, on files written with gguf-py."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from registry.gguf.facts import derive_facts
from registry.gguf.summary import facts_text
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
