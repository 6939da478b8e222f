"""Benchmark: block-wise evaluation (itrlab.eval) against SCAN's per-query numpy loop.

Seeded random embeddings (5000 images x 25000 captions x 1024-d by default, exact in float32, so both
must give bit-identical ranks), each implementation timed and its peak memory measured in a fresh
subprocess (itrlab.bench.ranking_speed). ``--interaction`` benchmarks the cross-attention model's sharded
ScoreFn against a per-caption loop instead (itrlab.bench.interaction_speed): the method of the config
xattn_synthetic_tiny (DBL's cross-attention baseline), its sizes set by the flags below.

Exit status: 0 if ranks and tables are identical (``--interaction``: the two score matrices agree), 1 if
not; 2 for a bad setting. Targets are printed, not enforced.

    python jobs/bench_eval.py                       # full size
    python jobs/bench_eval.py --images 1000 --dim 256 --protocol 5fold
    python jobs/bench_eval.py --interaction         # 1000 images, 36 regions, 64-d, sim 32, 8-16 words
    python jobs/bench_eval.py --interaction --images 200 --regions 10 --dim 32
"""

import _bootstrap  # noqa: F401 - first: a python without itrlab says how to start the job

import sys

from itrlab.bench import eval as bench_eval
from itrlab.bench.interaction_speed import MethodUnderTest


def cross_attention(args) -> MethodUnderTest:
    """--interaction's method: xattn, its similarity size ``--sim-dim``, λ = 9, the shard budget
    ``--shard-elements`` (default: the model's, itrlab.models.interaction.DEFAULT_SHARD_ELEMENTS)."""
    from itrlab.models.interaction import DEFAULT_SHARD_ELEMENTS

    if args.shard_elements is None:
        args.shard_elements = DEFAULT_SHARD_ELEMENTS
    return MethodUnderTest(
        "xattn_synthetic_tiny",
        (
            f"method.sim_dim={args.sim_dim}",
            "method.attention_lambda=9.0",
            f"method.shard_elements={args.shard_elements}",
        ),
        f"sim_dim={args.sim_dim}, λ=9",
        args.shard_elements,
    )


def main(argv=None) -> int:
    return bench_eval.main(argv, cross_attention)


if __name__ == "__main__":
    sys.exit(main())
