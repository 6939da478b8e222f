"""The evaluation benchmark (``jobs/bench_eval.py``): block-wise ranking (:mod:`itrlab.eval`) against SCAN's
per-query numpy loop.

Seeded random L2-normalised embeddings (5000 images x 25000 captions x 1024-d by default,
snapped to a grid so that every dot product is exact in float32: both implementations must
then give bit-identical ranks, ties included). Each implementation runs in a fresh
subprocess that loads the saved embeddings, so its time and memory are measured alone.

Memory: the worker resets its peak-RSS mark (``echo 5 > /proc/self/clear_refs``) once the
imports are done and the data is loaded, runs all its repeats, then reports peak RSS
(``VmHWM``) minus the RSS at the reset: what the implementation adds, allocator caching
included. (Not ``ru_maxrss``: a child process inherits its parent's high-water mark.)

Exit status: 0 if ranks and tables are identical, 1 if not. Targets are printed, not enforced.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

_log = logging.getLogger(__name__)

TARGET_RATIO = 20.0
TARGET_PEAK_MB = 2048.0


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
        "-c",
        "import sys; from itrlab.bench.eval import main; sys.exit(main(sys.argv[1:]))",
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
    load_before = os.getloadavg()[0]
    _log.info(
        f"data: {args.images} images x {len(captions)} captions x {args.dim}-d float32, seed {args.seed}, "
        f"protocol {args.protocol}, chunk {args.chunk} images"
    )
    with tempfile.TemporaryDirectory(prefix="bench_eval_") as tmp:
        data = Path(tmp)
        np.save(data / "images.npy", images)
        np.save(data / "captions.npy", captions)
        chunked = run_worker("chunked", data, args.repeats, args)
        baseline = run_worker("baseline", data, args.baseline_repeats, args)

    load_after = os.getloadavg()[0]
    same_ranks = all(np.array_equal(chunked["ranks"][k], baseline["ranks"][k]) for k in ("i2t", "t2i"))
    same_table = chunked["table"] == baseline["table"] and chunked["sums"] == baseline["sums"]
    ratio = baseline["median_s"] / chunked["median_s"]
    _log.info(chunked["table_text"])
    _log.info(f"{'implementation':<28}{'runs (s)':<28}{'median (s)':>11}{'peak extra RSS (MB)':>22}")
    for name, report in (("chunked (itrlab.eval)", chunked), ("per-query numpy (SCAN)", baseline)):
        runs = ", ".join(f"{t:.2f}" for t in report["times_s"])
        _log.info(f"{name:<28}{runs:<28}{report['median_s']:>11.2f}{report['peak_extra_mb']:>22.0f}")
    how = "reset at the start" if chunked["peak_reset"] and baseline["peak_reset"] else "NOT reset (upper bound)"
    _log.info(
        f"memory: peak RSS (VmHWM, {how}) of a fresh subprocess over all its runs, minus its RSS after "
        f"imports and data loading (the data, {(images.nbytes + captions.nbytes) / 2**20:.0f} MB, not counted)"
    )
    _log.info(
        f"speed-up (baseline median / chunked median): {ratio:.1f}x   "
        f"[target >= {TARGET_RATIO:.0f}x: {'met' if ratio >= TARGET_RATIO else 'NOT met'}]"
    )
    _log.info(
        f"chunked peak extra memory: {chunked['peak_extra_mb']:.0f} MB   "
        f"[target < {TARGET_PEAK_MB:.0f} MB: {'met' if chunked['peak_extra_mb'] < TARGET_PEAK_MB else 'NOT met'}]"
    )
    _log.info(
        f"machine: {os.cpu_count()} CPUs, torch threads {chunked['threads']['torch']}; 1-min load average "
        f"{load_before:.2f} before, {load_after:.2f} after (the load after includes this run)"
    )
    _log.info(f"identical ranks: {same_ranks}; identical tables and MD sums: {same_table}")
    if args.json:
        summary = {
            k: {key: r[key] for key in ("times_s", "median_s", "peak_extra_mb", "table")}
            for k, r in (("chunked", chunked), ("baseline", baseline))
        }
        summary.update(ratio=ratio, identical=same_ranks and same_table, args=vars(args) | {"json": str(args.json)})
        args.json.write_text(json.dumps(summary, indent=2))
    return 0 if same_ranks and same_table else 1
