"""The synthetic family files (headers of published models' shapes, sparse data), written
once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from registry.gguf.memory_profile import MemoryProfile, memory_profile
from registry.hub.local import read_header
from tests.memory import families


class FamilyFiles:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._profiles: dict[str, MemoryProfile] = {}

    def path(self, name: str) -> Path:
        path = self.directory / f"{name}.gguf"
        if not path.exists():
            families.write(families.by_name(name), path)
        return path

    def profile(self, name: str) -> MemoryProfile:
        if name not in self._profiles:
            profile = memory_profile(read_header(self.path(name)).header)
            assert profile is not None, name
            self._profiles[name] = profile
        return self._profiles[name]


@pytest.fixture(scope="session")
def family_files(tmp_path_factory: pytest.TempPathFactory) -> FamilyFiles:
    return FamilyFiles(tmp_path_factory.mktemp("families"))
