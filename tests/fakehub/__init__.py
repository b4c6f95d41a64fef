"""A fake Hugging Face Hub (API, /resolve/ redirects, a CDN) on loopback, for tests and benches."""

from tests.fakehub.corpus import Corpus, Repo, RepoFile, gguf_repo, sample_corpus, synthetic_corpus
from tests.fakehub.faults import Fault, Faults
from tests.fakehub.server import FakeHub, RequestRecord
from tests.fakehub.synth import ModelSpec

__all__ = [
    "Corpus",
    "FakeHub",
    "Fault",
    "Faults",
    "ModelSpec",
    "Repo",
    "RepoFile",
    "RequestRecord",
    "gguf_repo",
    "sample_corpus",
    "synthetic_corpus",
]
