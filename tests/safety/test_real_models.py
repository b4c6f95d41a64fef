"""The templates the sample models really carry, read with our own parser."""

from __future__ import annotations

from pathlib import Path

from registry.gguf.reader import parse_header
from registry.safety import SandboxPool, chat_templates, findings_to_json, scan_header, special_tokens
from tests.safety import templates as T


def header_of(path: Path):  # type: ignore[no-untyped-def]
    with path.open("rb") as f:
        data = f.read(8 << 20)
    return parse_header(data, file_size=path.stat().st_size)


def test_smollm2_template_is_clean(smollm2_path: Path, pool: SandboxPool) -> None:
    header = header_of(smollm2_path)
    templates = chat_templates(header)
    assert list(templates) == ["default"]
    assert "You are a helpful AI assistant named SmolLM" in templates["default"]
    assert special_tokens(header) == ("<|im_start|>", "<|im_end|>")
    findings = scan_header(header, runner=pool)
    assert findings == []
    assert findings_to_json(findings) == []  # what `registry inspect --json` prints


def test_gemma3_sample_is_clean(gemma3_path: Path, pool: SandboxPool) -> None:
    # The 270m base model ships no chat template: nothing to scan, nothing to report.
    header = header_of(gemma3_path)
    assert chat_templates(header) == {}
    assert scan_header(header, runner=pool) == []
    # Its instruction-tuned siblings' template, rendered with this file's bos/eos, is clean too.
    bos, eos = special_tokens(header)
    assert (bos, eos) == ("<bos>", "<eos>")
    from registry.safety import scan_templates

    assert scan_templates({"default": T.GEMMA3}, bos=bos, eos=eos, runner=pool) == []
