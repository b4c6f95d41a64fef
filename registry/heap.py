"""Garbage collection for the long-running processes: the API server, a crawl, a worker.

What is alive once a process has started (modules, settings, SQLAlchemy metadata, compiled
statements) lives as long as it does; freezing it keeps every full collection from walking
it again. A crawl then allocates tens of thousands of short-lived objects per header (tensor
infos, facts, rows) that reference counting frees; a young collection every 700 of them
(CPython's default) found nothing to free and cost a crawl about a tenth of its CPU
(bench/crawl.py, docs/performance.md).
"""

from __future__ import annotations

import gc

YOUNG_COLLECTION_EVERY = 20_000  # allocations between young-generation collections


def settle() -> None:
    """Call once start-up is done: freeze what is alive and collect the young less often."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, middle, old)
