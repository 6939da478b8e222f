"""The cross-attention scorer's benchmark (``jobs/bench_eval.py --interaction``): the sharded :data:`ScoreFn`
of an interaction method against a per-caption loop.

The method is the one a :class:`MethodUnderTest` names (an experiment config and the overrides that give
it the benchmark's sizes; ``jobs/bench_eval.py`` names DBL's cross-attention baseline), built through the
method registry as a run builds it: seeded encoded features (1000 images x 5000 captions, small dims by
default), the method's sharded :data:`ScoreFn` driven by ``itrlab.eval.evaluate``, against a per-caption
Python loop that scores one caption against all images at a time (SCAN's ``xattn_score_t2i`` pattern).
Both run in this process, one after the other, after a warm-up of each. Exit status: 0 if the two score
matrices agree (allclose), 1 if not; whether the recall tables are identical is printed (an untrained
head scores pairs nearly alike, so rounding can swap near-ties).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import time
from dataclasses import dataclass

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MethodUnderTest:
    """The interaction method the benchmark measures: an experiment config, the overrides of its method's
    own keys that set the benchmark's sizes, how the data line names them, and the shard budget."""

    experiment: str
    overrides: tuple[str, ...]
    note: str  # e.g. "s=32, λ=9", in the data line
    shard_budget: int  # elements of a shard's largest intermediate, in the data line


def interaction_features(n_images: int, cpi: int, regions: int, dim: int, min_words: int, max_words: int, seed: int):
    """Seeded unit-norm region features (N, R, d), word features (cpi·N, L, d) and lengths.

    Each word is one of its image's regions plus as much noise, so that captions do match their
    images; lengths are uniform in [min_words, max_words], positions past them are zero.
    """
    import torch

    generator = torch.Generator().manual_seed(seed)
    unit = torch.nn.functional.normalize
    image_features = unit(torch.randn(n_images, regions, dim, generator=generator), dim=-1)
    n_captions = cpi * n_images
    lengths = torch.randint(min_words, max_words + 1, (n_captions,), generator=generator)
    picked = torch.randint(0, regions, (n_captions, max_words), generator=generator)
    owner = torch.arange(n_captions)[:, None] // cpi
    noise = torch.randn(n_captions, max_words, dim, generator=generator) / dim**0.5
    words = unit(image_features[owner, picked] + noise, dim=-1)
    words[torch.arange(max_words)[None, :] >= lengths[:, None]] = 0.0
    return image_features, words, lengths


def interaction_method(method: MethodUnderTest, dim: int):
    """The method of ``method.experiment`` with ``dim``-d features and embeddings and its own overrides; its
    text encoder (2 words, 2-d: unused here) built from the registry as a run builds it."""
    from itrlab.assembly import load_experiment
    from itrlab.methods.context import BuildContext
    from itrlab.methods.registry import METHODS

    config = load_experiment(method.experiment, [f"model.embed_dim={dim}", "model.text.word_dim=2", *method.overrides])
    return METHODS[config.method.name].from_config(config, BuildContext(feature_dim=dim, vocab_size=2))


def interaction_main(args: argparse.Namespace, under_test: MethodUnderTest) -> int:
    """``--interaction``: the sharded ScoreFn against a per-caption loop (see the module doc)."""
    import torch

    from itrlab.eval import evaluate, get_protocol

    images, dim = args.images, args.dim
    get_protocol(args.protocol).check(images)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    method = interaction_method(under_test, dim)
    model = method.model.eval()
    regions, words, lengths = interaction_features(
        images, args.cpi, args.regions, dim, args.min_words, args.max_words, args.seed
    )
    n_captions = len(lengths)
    _log.info(
        f"data: {images} images x {args.regions} regions, {n_captions} captions x {args.min_words}-"
        f"{args.max_words} words, d={dim}, {under_test.note}, float32; protocol {args.protocol}, "
        f"chunk {args.chunk} images, shard budget {under_test.shard_budget} elements; seed {args.seed}"
    )
    load_before = os.getloadavg()[0]

    score_fn = method.split_score_fn(regions, words, lengths)
    sharded = torch.full((images, n_captions), float("nan"))
    calls = 0

    def recording(image_slice: slice, caption_slice: slice) -> torch.Tensor:
        nonlocal calls
        calls += 1
        block = score_fn(image_slice, caption_slice)
        sharded[image_slice, caption_slice] = block
        return block

    def loop_scores() -> torch.Tensor:
        looped = torch.empty(images, n_captions)
        with torch.no_grad():
            for j in range(n_captions):  # one caption against all images, its padding trimmed
                n = int(lengths[j])
                looped[:, j] = model.similarity(regions, words[j : j + 1, :n], lengths[j : j + 1])[:, 0]
        return looped

    def loop_evaluate():
        looped = loop_scores()
        return looped, evaluate(lambda a, b: looped[a, b], images, args.protocol, args.cpi, args.chunk)

    # Warm-up (allocator, thread pool) of both paths before anything is timed.
    score_fn(slice(0, min(images, 64)), slice(0, min(n_captions, 320)))
    with torch.no_grad():
        model.similarity(regions, words[:1], lengths[:1])

    def timed(run):
        """(result, wall seconds, CPU seconds of this process: less sensitive to other load)."""
        wall, cpu = time.perf_counter(), time.process_time()
        result = run()
        return result, time.perf_counter() - wall, time.process_time() - cpu

    sharded_runs, loop_runs = [], []
    for _ in range(args.repeats):
        table, *spent = timed(lambda: evaluate(recording, images, args.protocol, args.cpi, args.chunk))
        sharded_runs.append(spent)
    calls //= args.repeats
    for _ in range(args.baseline_repeats):
        (looped, loop_table), *spent = timed(loop_evaluate)
        loop_runs.append(spent)
    load_after = os.getloadavg()[0]

    sharded_s, loop_s = (statistics.median(r[0] for r in runs) for runs in (sharded_runs, loop_runs))
    sharded_cpu, loop_cpu = (statistics.median(r[1] for r in runs) for runs in (sharded_runs, loop_runs))
    agree = bool(torch.allclose(sharded, looped, rtol=1e-4, atol=1e-5)) and not sharded.isnan().any().item()
    max_diff = float((sharded - looped).abs().max())
    same_table = table.to_dict() == loop_table.to_dict()
    ratio, cpu_ratio = loop_s / sharded_s, loop_cpu / sharded_cpu
    _log.info(table.format())
    _log.info(f"{'implementation':<44}{'wall runs (s)':<20}{'median wall (s)':>16}{'median CPU (s)':>16}")
    for name, runs, wall, cpu in (
        (f"sharded ScoreFn + evaluate ({calls} blocks)", sharded_runs, sharded_s, sharded_cpu),
        (f"per-caption loop ({n_captions} calls) + evaluate", loop_runs, loop_s, loop_cpu),
    ):
        _log.info(f"{name:<44}{', '.join(f'{r[0]:.2f}' for r in runs):<20}{wall:>16.2f}{cpu:>16.2f}")
    _log.info(
        f"speed-up (loop / sharded): {ratio:.2f}x wall, {cpu_ratio:.2f}x CPU time; "
        f"{images * n_captions / sharded_s / 1e6:.3f} M pairs/s sharded"
    )
    _log.info(
        f"machine: {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}; 1-min load average "
        f"{load_before:.2f} before, {load_after:.2f} after (other load skews wall times; CPU times less so)"
    )
    _log.info(
        f"scores allclose (rtol 1e-4, atol 1e-5): {agree} (max |diff| {max_diff:.2e}); "
        f"identical recall tables: {same_table}"
    )
    if agree and not same_table:
        _log.info(
            "  (the untrained head scores every pair nearly alike, so rounding-level differences between "
            "the two summation orders can swap near-ties; the tables are informative only)"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "sharded_runs_s": sharded_runs,
                    "loop_runs_s": loop_runs,
                    "ratio_wall": ratio,
                    "ratio_cpu": cpu_ratio,
                    "allclose": agree,
                    "max_abs_diff": max_diff,
                    "same_table": same_table,
                    "table": table.to_dict(),
                    "blocks": calls,
                    "args": vars(args) | {"json": str(args.json)},
                },
                indent=2,
                default=str,
            )
        )
    return 0 if agree else 1
