"""``jobs/bench_eval.py``: the evaluation benchmarks' command line.

By default block-wise ranking against SCAN's per-query loop (:mod:`itrlab.bench.ranking_speed`; each side in a
subprocess of its own that runs this command line with ``--worker``); ``--interaction`` the sharded
cross-attention scorer of the method the job names against a per-caption loop
(:mod:`itrlab.bench.interaction_speed`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from itrlab.bench.interaction_speed import MethodUnderTest, interaction_main
from itrlab.bench.ranking_speed import ranking_main, worker
from itrlab.errors import ItrlabError, report

DESCRIPTION = "Benchmark: block-wise evaluation (itrlab.eval) against SCAN's per-query numpy loop."


def main(
    argv: list[str] | None = None, method_under_test: Callable[[argparse.Namespace], MethodUnderTest] | None = None
) -> int:
    """The benchmark ``argv`` asks for; ``method_under_test(args)``: the method ``--interaction`` measures."""
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--images", type=int, help="number of images N (default 5000; 1000 with --interaction)")
    parser.add_argument("--cpi", type=int, default=5, help="captions per image (default 5)")
    parser.add_argument("--dim", type=int, help="embedding size (default 1024; 64 with --interaction)")
    parser.add_argument("--protocol", default="all", help="evaluation protocol (default all)")
    parser.add_argument("--chunk", type=int, default=512, help="images per block (default 512)")
    parser.add_argument(
        "--repeats", type=int, help="timed runs of the chunked path (median; default 3, 1 with --interaction)"
    )
    parser.add_argument("--baseline-repeats", type=int, default=1, help="timed runs of the baseline")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--worker", choices=["chunked", "baseline"], help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    interaction = parser.add_argument_group("--interaction: the cross-attention ScoreFn")
    interaction.add_argument(
        "--interaction",
        action="store_true",
        help="benchmark the sharded cross-attention ScoreFn against a per-caption loop",
    )
    interaction.add_argument("--regions", type=int, default=36, help="regions per image (default 36)")
    interaction.add_argument("--sim-dim", type=int, default=32, help="similarity vector size s (default 32)")
    interaction.add_argument("--min-words", type=int, default=8, help="shortest caption (default 8)")
    interaction.add_argument("--max-words", type=int, default=16, help="longest caption (default 16)")
    interaction.add_argument(
        "--shard-elements",
        type=int,
        help="shard budget in elements of the largest intermediate (default: the "
        "method's, itrlab.models.interaction.DEFAULT_SHARD_ELEMENTS)",
    )
    interaction.add_argument("--threads", type=int, help="torch threads (default: torch's own choice)")
    args = parser.parse_args(argv)
    defaults = (
        {"images": 1000, "dim": 64, "repeats": 1} if args.interaction else {"images": 5000, "dim": 1024, "repeats": 3}
    )
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.interaction:
        if method_under_test is None:
            parser.error("--interaction: this command line names no method to measure")
        try:
            return interaction_main(args, method_under_test(args))
        except ItrlabError as err:  # a size the method's settings refuse
            return report(err)
    if args.worker:
        worker(args)
        return 0
    return ranking_main(args)
