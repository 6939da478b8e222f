"""The evaluation benchmark: block-wise ranking (:mod:`itrlab.eval`) against SCAN's per-query numpy loop, or
(``--interaction``) the cross-attention model's sharded ScoreFn against a per-caption loop; each baseline measured
in the same run.

    python benchmarks/eval.py                       # full size
    python benchmarks/eval.py --images 1000 --dim 256 --protocol 5fold
    python benchmarks/eval.py --interaction         # 1000 images, 36 regions, 64-d, sim 32, 8-16 words
    python benchmarks/eval.py --interaction --images 200 --regions 10 --dim 32

**Ranking**: seeded random L2-normalised embeddings (5000 images x 25000 captions x 1024-d by default, snapped to
a grid so that every dot product is exact in float32: both implementations must then give bit-identical ranks,
ties included). Each implementation runs in a fresh subprocess (this script with ``--worker``) that loads the
saved embeddings, so its time and memory are measured alone. Memory: the worker resets its peak-RSS mark
(``echo 5 > /proc/self/clear_refs``) once the imports are done and the data is loaded, runs all its repeats, then
reports peak RSS (``VmHWM``) minus the RSS at the reset: what the implementation adds, allocator caching included
(not ``ru_maxrss``: a child process inherits its parent's high-water mark). Exit status 0 if ranks and tables
are identical, 1 if not.

**Interaction**: the method of the config xattn_synthetic_tiny (DBL's cross-attention baseline), its sizes set by
the flags, built through the method registry as a run builds it: seeded encoded features, the method's sharded
ScoreFn driven by ``itrlab.eval.evaluate``, against a per-caption Python loop that scores one caption against all
images at a time (SCAN's ``xattn_score_t2i`` pattern). Both run in this process, one after the other, after a
warm-up of each. Exit status 0 if the two score matrices agree (allclose), 1 if not; whether the recall tables are
identical is printed (an untrained head scores pairs nearly alike, so rounding can swap near-ties).

Exit status 2 for a bad setting. Targets are printed, not enforced; the load average is printed beside the times.
"""

from __future__ import annotations

import _bootstrap  # noqa: F401 - first: a python without itrlab says how to start the script

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from common import BENCHMARKS, load_average, machine

TARGET_RATIO = 20.0
TARGET_PEAK_MB = 2048.0
EXPERIMENT = "xattn_synthetic_tiny"  # --interaction's method: DBL's cross-attention baseline


def _status_mb(key: str) -> float:
    """A memory line of /proc/self/status (VmRSS: current RSS, VmHWM: peak RSS), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024.0
    raise RuntimeError(f"{key} not in /proc/self/status")


def _reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False if the kernel refuses."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def worker(args: argparse.Namespace) -> None:
    """Time one implementation on the saved data; write ranks and a JSON report to --data."""
    import torch

    from itrlab.eval import dense_score_fn, rank_folds, reference_rank_folds, table_from_folds

    data = Path(args.data)
    images, captions = np.load(data / "images.npy"), np.load(data / "captions.npy")
    n_images = len(images)
    reset = _reset_peak()
    rss_before = _status_mb("VmRSS")
    times, fold_ranks = [], None
    for _ in range(args.repeats):
        start = time.perf_counter()
        if args.worker == "chunked":
            fold_ranks = rank_folds(dense_score_fn(images, captions), n_images, args.protocol, args.cpi, args.chunk)
        else:
            fold_ranks = reference_rank_folds(images, captions, args.protocol, args.cpi)
        table = table_from_folds(fold_ranks, args.protocol, n_images)
        times.append(time.perf_counter() - start)
    np.savez(
        data / f"{args.worker}_ranks.npz",
        i2t=np.concatenate([r.i2t for r in fold_ranks]),
        t2i=np.concatenate([r.t2i for r in fold_ranks]),
    )
    report = {
        "times_s": times,
        "peak_extra_mb": _status_mb("VmHWM") - rss_before,
        "peak_reset": reset,
        "rss_before_mb": rss_before,
        "table": table.to_dict(),
        "table_text": table.format(),
        "sums": [[r.positive_sum, r.negative_sum] for r in fold_ranks],
        "threads": {"torch": torch.get_num_threads()},
    }
    (data / f"{args.worker}.json").write_text(json.dumps(report))


def run_worker(name: str, data: Path, repeats: int, args: argparse.Namespace) -> dict:
    """One implementation in a fresh subprocess (the benchmark's command line with ``--worker``); its report."""
    command = [
        sys.executable,
        str(BENCHMARKS / "eval.py"),
        "--worker",
        name,
        "--data",
        str(data),
        "--repeats",
        str(repeats),
        "--protocol",
        args.protocol,
        "--cpi",
        str(args.cpi),
        "--chunk",
        str(args.chunk),
    ]
    subprocess.run(command, check=True)
    report = json.loads((data / f"{name}.json").read_text())
    report["ranks"] = dict(np.load(data / f"{name}_ranks.npz"))
    report["median_s"] = statistics.median(report["times_s"])
    return report


def ranking_main(args: argparse.Namespace) -> int:
    """Both implementations on the same seeded embeddings, compared (see the module doc)."""
    from itrlab.eval import get_protocol, random_embeddings

    get_protocol(args.protocol).check(args.images)
    images, captions = random_embeddings(args.images, args.dim, args.cpi, seed=args.seed)
    load_before = load_average()
    print(
        f"data: {args.images} images x {len(captions)} captions x {args.dim}-d float32, seed {args.seed}, "
        f"protocol {args.protocol}, chunk {args.chunk} images"
    )
    with tempfile.TemporaryDirectory(prefix="bench_eval_") as tmp:
        data = Path(tmp)
        np.save(data / "images.npy", images)
        np.save(data / "captions.npy", captions)
        chunked = run_worker("chunked", data, args.repeats, args)
        baseline = run_worker("baseline", data, args.baseline_repeats, args)

    load_after = load_average()
    same_ranks = all(np.array_equal(chunked["ranks"][k], baseline["ranks"][k]) for k in ("i2t", "t2i"))
    same_table = chunked["table"] == baseline["table"] and chunked["sums"] == baseline["sums"]
    ratio = baseline["median_s"] / chunked["median_s"]
    print(chunked["table_text"])
    print(f"{'implementation':<28}{'runs (s)':<28}{'median (s)':>11}{'peak extra RSS (MB)':>22}")
    for name, report in (("chunked (itrlab.eval)", chunked), ("per-query numpy (SCAN)", baseline)):
        runs = ", ".join(f"{t:.2f}" for t in report["times_s"])
        print(f"{name:<28}{runs:<28}{report['median_s']:>11.2f}{report['peak_extra_mb']:>22.0f}")
    how = "reset at the start" if chunked["peak_reset"] and baseline["peak_reset"] else "NOT reset (upper bound)"
    print(
        f"memory: peak RSS (VmHWM, {how}) of a fresh subprocess over all its runs, minus its RSS after "
        f"imports and data loading (the data, {(images.nbytes + captions.nbytes) / 2**20:.0f} MB, not counted)"
    )
    print(
        f"speed-up (baseline median / chunked median): {ratio:.1f}x   "
        f"[target >= {TARGET_RATIO:.0f}x: {'met' if ratio >= TARGET_RATIO else 'NOT met'}]"
    )
    print(
        f"chunked peak extra memory: {chunked['peak_extra_mb']:.0f} MB   "
        f"[target < {TARGET_PEAK_MB:.0f} MB: {'met' if chunked['peak_extra_mb'] < TARGET_PEAK_MB else 'NOT met'}]"
    )
    print(
        f"machine: {os.cpu_count()} CPUs, torch threads {chunked['threads']['torch']}; 1-min load average "
        f"{load_before:.2f} before, {load_after:.2f} after (the load after includes this run)"
    )
    print(f"identical ranks: {same_ranks}; identical tables and MD sums: {same_table}")
    if args.json:
        summary = {
            k: {key: r[key] for key in ("times_s", "median_s", "peak_extra_mb", "table")}
            for k, r in (("chunked", chunked), ("baseline", baseline))
        }
        summary.update(ratio=ratio, identical=same_ranks and same_table, args=vars(args) | {"json": str(args.json)})
        args.json.write_text(json.dumps(summary, indent=2))
    return 0 if same_ranks and same_table else 1


# ---------------------------------------------------------------------- --interaction


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


def interaction_method(overrides: tuple[str, ...], dim: int):
    """The method of :data:`EXPERIMENT` with ``dim``-d features and embeddings and ``overrides``; its text encoder
    (2 words, 2-d: unused here) built from the registry as a run builds it."""
    from itrlab.assembly import load_experiment
    from itrlab.methods.context import BuildContext
    from itrlab.methods.registry import METHODS

    config = load_experiment(EXPERIMENT, [f"model.embed_dim={dim}", "model.text.word_dim=2", *overrides])
    return METHODS[config.method.name].from_config(config, BuildContext(feature_dim=dim, vocab_size=2))


def interaction_main(args: argparse.Namespace) -> int:
    """``--interaction``: the sharded ScoreFn against a per-caption loop (see the module doc): similarity size
    ``--sim-dim``, λ = 9, the shard budget ``--shard-elements`` (default: the model's)."""
    import torch

    from itrlab.eval import evaluate, get_protocol
    from itrlab.models.interaction import DEFAULT_SHARD_ELEMENTS

    budget = args.shard_elements = args.shard_elements or DEFAULT_SHARD_ELEMENTS
    overrides = (f"method.sim_dim={args.sim_dim}", "method.attention_lambda=9.0", f"method.shard_elements={budget}")

    images, dim = args.images, args.dim
    get_protocol(args.protocol).check(images)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    method = interaction_method(overrides, dim)
    model = method.model.eval()
    regions, words, lengths = interaction_features(
        images, args.cpi, args.regions, dim, args.min_words, args.max_words, args.seed
    )
    n_captions = len(lengths)
    print(
        f"data: {images} images x {args.regions} regions, {n_captions} captions x {args.min_words}-"
        f"{args.max_words} words, d={dim}, sim_dim={args.sim_dim}, λ=9, float32; protocol {args.protocol}, "
        f"chunk {args.chunk} images, shard budget {budget} elements; seed {args.seed}"
    )
    load_before = load_average()

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
    load_after = load_average()

    sharded_s, loop_s = (statistics.median(r[0] for r in runs) for runs in (sharded_runs, loop_runs))
    sharded_cpu, loop_cpu = (statistics.median(r[1] for r in runs) for runs in (sharded_runs, loop_runs))
    agree = bool(torch.allclose(sharded, looped, rtol=1e-4, atol=1e-5)) and not sharded.isnan().any().item()
    max_diff = float((sharded - looped).abs().max())
    same_table = table.to_dict() == loop_table.to_dict()
    ratio, cpu_ratio = loop_s / sharded_s, loop_cpu / sharded_cpu
    print(table.format())
    print(f"{'implementation':<44}{'wall runs (s)':<20}{'median wall (s)':>16}{'median CPU (s)':>16}")
    for name, runs, wall, cpu in (
        (f"sharded ScoreFn + evaluate ({calls} blocks)", sharded_runs, sharded_s, sharded_cpu),
        (f"per-caption loop ({n_captions} calls) + evaluate", loop_runs, loop_s, loop_cpu),
    ):
        print(f"{name:<44}{', '.join(f'{r[0]:.2f}' for r in runs):<20}{wall:>16.2f}{cpu:>16.2f}")
    print(
        f"speed-up (loop / sharded): {ratio:.2f}x wall, {cpu_ratio:.2f}x CPU time; "
        f"{images * n_captions / sharded_s / 1e6:.3f} M pairs/s sharded"
    )
    print(machine(load_before, load_after) + "; CPU times less so")
    print(
        f"scores allclose (rtol 1e-4, atol 1e-5): {agree} (max |diff| {max_diff:.2e}); "
        f"identical recall tables: {same_table}"
    )
    if agree and not same_table:
        print(
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


def main(argv: list[str] | None = None) -> int:
    """The benchmark ``argv`` asks for (see the module doc)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
        from itrlab.errors import ItrlabError, report

        try:
            return interaction_main(args)
        except ItrlabError as err:  # a size the method's settings refuse
            return report(err)
    if args.worker:
        worker(args)
        return 0
    return ranking_main(args)


if __name__ == "__main__":
    sys.exit(main())
