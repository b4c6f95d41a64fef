"""`python -m tests.fakehub --port N --repos N`: serve a fake hub for benches until killed."""

from __future__ import annotations

import argparse
import asyncio
import contextlib

from tests.fakehub.corpus import (
    Corpus,
    header_corpus,
    multiquant_corpus,
    sample_corpus,
    sibling_corpus,
    synthetic_corpus,
)
from tests.fakehub.faults import Fault
from tests.fakehub.server import FakeHub


async def _serve(args: argparse.Namespace) -> None:
    if args.multi_quant:
        corpus = multiquant_corpus(args.repos, seed=args.seed)
    elif args.repos:
        corpus = synthetic_corpus(args.repos, seed=args.seed, big_vocab=args.big_vocab)
    else:
        corpus = sample_corpus() if not args.sibling_corpus else Corpus()
    for wanted, extra in ((args.header_corpus, header_corpus), (args.sibling_corpus, sibling_corpus)):
        if wanted:
            for repo in extra():
                corpus.add(repo)
    faults = [Fault("latency", route="*", delay=args.latency, times=None)] if args.latency else []
    # Benches make millions of requests: recording them all would only grow memory.
    async with FakeHub(
        corpus, port=args.port, cdn_port=args.cdn_port, tokens=args.token, record=False, faults=faults
    ) as hub:
        print(f"fake hub {hub.endpoint} cdn {hub.cdn_url} repos {len(corpus)}", flush=True)
        await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.fakehub", description=__doc__)
    p.add_argument("--port", type=int, default=8900, help="hub API port on 127.0.0.1 (0: any free port)")
    p.add_argument("--cdn-port", type=int, default=0, help="CDN port on 127.0.0.1 (0: any free port)")
    p.add_argument("--repos", type=int, default=0, help="synthetic repos to serve (0: the test corpus)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--big-vocab", action="store_true", help="mix in vocabularies up to 262k tokens")
    p.add_argument(
        "--header-corpus", action="store_true", help="add the fetch-cost bench's repos (bench/...)"
    )
    p.add_argument("--multi-quant", action="store_true",
                   help="the --repos are multi-quant repos (8 to 24 quants of one model each)")  # fmt: skip
    p.add_argument(
        "--sibling-corpus",
        action="store_true",
        help="add the sibling-reuse bench's multi-quant repos (sib/...)",
    )
    p.add_argument("--latency", type=float, default=0.0, help="seconds added to every request")
    p.add_argument("--token", action="append", default=["hf_test_token"], help="accepted access token")
    args = p.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
