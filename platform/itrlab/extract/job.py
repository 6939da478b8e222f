"""The extraction job: a data set's photos and captions (in any registered format) -> the precomp layout.

Per split: ``{split}_ims.npy`` (N, 49, 1280) float32 or float16, ``{split}_global.npy`` (N, 1280),
``{split}_caps.txt`` (5 lines per image) and ``{split}_ids.txt``; then ``extract.json`` (model, preprocessing,
counts, caption changes, bad images, timing), written last: a folder with it holds a finished extraction. Pending
chunks (:mod:`itrlab.extract.plan`) are written as shards (:mod:`itrlab.extract.shards`), so a re-run skips
finished ones; the shards are then assembled and removed (plan for twice the feature size meanwhile). Bad images
stop the job with their list before the model loads (:class:`~itrlab.extract.images.BadImagesError`, exit 2),
unless ``skip_bad`` leaves them out and lists them. :mod:`itrlab.extract.ray_tasks` runs the same chunks on Ray.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from itrlab.errors import DataError, ItrlabError
from itrlab.extract.coverage import Coverage
from itrlab.extract.image_encoder import FEATURE_DIM, FEATURES, N_REGIONS, ImageEncoder, torch_threads
from itrlab.extract.images import PREPROCESSING, BadImagesError, path_source
from itrlab.extract.layouts import derive_layouts, parse_pool
from itrlab.extract.plan import FORMAT_VERSION, MANIFEST, ExtractOptions, Plan, extraction_lock, plan_splits, prepare
from itrlab.extract.shards import Chunk, ChunkResult, encode_chunk, read_shard_meta, write_shard
from itrlab.files import atomic_write_text


@dataclass
class RunStats:
    """How the chunks of this invocation were computed."""

    backend: str
    workers: int
    threads_per_worker: int
    images: int = 0  # attempted in this run
    encode_seconds: float = 0.0
    load_seconds: float = 0.0

    @property
    def images_per_s(self) -> float:
        return self.images / self.encode_seconds if self.encode_seconds > 0 else 0.0


def store_result(plan: Plan, chunk: Chunk, result: ChunkResult) -> None:
    """Check a finished chunk and write its shard (shared by the in-process and Ray runners)."""
    if result.bad and not plan.options.skip_bad:
        raise BadImagesError(plan.images_dir, result.bad)
    write_shard(plan.work_dir, chunk, result)


def progress_bar(plan: Plan):
    from tqdm import tqdm

    return tqdm(
        total=plan.n_pending,
        unit="img",
        desc="extract",
        disable=not plan.options.progress,
        file=sys.stderr,
        dynamic_ncols=True,
        smoothing=0.1,
    )


def run_local(plan: Plan) -> RunStats:
    """Compute the pending chunks in this process (the encoder loads once)."""
    options = plan.options
    with torch_threads(options.threads) as threads:
        stats = RunStats("in-process", 1, threads)
        if not plan.pending:
            return stats
        start = time.perf_counter()
        encoder = ImageEncoder(options.device)
        stats.load_seconds = time.perf_counter() - start
        start = time.perf_counter()
        with progress_bar(plan) as bar:
            for chunk in plan.pending:
                sources = [path_source(plan.images_dir, image) for image in chunk.images]
                result = encode_chunk(chunk, sources, encoder, options.batch_size, options.dtype, on_batch=bar.update)
                store_result(plan, chunk, result)
                stats.images += len(chunk.images)
        stats.encode_seconds = time.perf_counter() - start
    return stats


def assemble(plan: Plan, stats: RunStats, started: float) -> dict[str, Any]:
    """Concatenate the shards into the final files, write ``extract.json``, remove the shards."""
    out, dtype = plan.out, plan.options.dtype
    metas = {chunk.name: read_shard_meta(plan.work_dir, chunk) for chunk in plan.chunks}
    missing = [name for name, meta in metas.items() if meta is None]
    if missing:
        raise ItrlabError(f"shards missing after extraction: {', '.join(missing[:5])}")
    bad: list[dict[str, Any]] = []
    counts: dict[str, dict[str, int]] = {}
    for split in plan.splits:
        chunks = [c for c in plan.chunks if c.split == split]
        kept = [c.images[i] for c in chunks for i in metas[c.name]["kept"]]
        bad += [dict(b, split=split) for c in chunks for b in metas[c.name]["bad"]]
        if not kept:
            raise DataError(plan.images_dir, f"split '{split}' has no readable image")
        n = len(kept)
        regions_tmp, global_tmp = out / f"{split}_ims.npy.tmp", out / f"{split}_global.npy.tmp"
        regions = np.lib.format.open_memmap(regions_tmp, mode="w+", dtype=dtype, shape=(n, N_REGIONS, FEATURE_DIM))
        pooled = np.lib.format.open_memmap(global_tmp, mode="w+", dtype=dtype, shape=(n, FEATURE_DIM))
        row = 0
        for chunk in chunks:
            with np.load(plan.work_dir / f"{chunk.name}.npz") as shard:
                part = shard["regions"]
                regions[row : row + len(part)] = part
                pooled[row : row + len(part)] = shard["global_features"]
                row += len(part)
        if row != n:
            raise ItrlabError(f"split '{split}': shards hold {row} images, their metadata {n}")
        regions.flush()
        pooled.flush()
        del regions, pooled
        captions = "".join(caption + "\n" for image in kept for caption in image.captions)
        atomic_write_text(out / f"{split}_caps.txt", captions)
        atomic_write_text(out / f"{split}_ids.txt", "".join(f"{image.image_id}\n" for image in kept))
        os.replace(regions_tmp, out / f"{split}_ims.npy")
        os.replace(global_tmp, out / f"{split}_global.npy")
        counts[split] = {"images": n, "captions": n * plan.options.captions_per_image}

    wall = time.perf_counter() - started
    manifest = {
        "format": "itrlab-extract",
        "version": FORMAT_VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "model": plan.settings["model"],
        "preprocessing": PREPROCESSING,
        "features": FEATURES,
        "dtype": dtype,
        "files": {
            "regions": "{split}_ims.npy",
            "global": "{split}_global.npy",
            "captions": "{split}_caps.txt",
            "ids": "{split}_ids.txt",
        },
        "source": plan.options.reader().source(),
        "images_sha256": plan.settings["images"],
        "splits": counts,
        "captions": plan.report,
        "bad_images": bad,
        "run": {
            "backend": stats.backend,
            "workers": stats.workers,
            "threads_per_worker": stats.threads_per_worker,
            "images_this_run": stats.images,
            "model_load_s": round(stats.load_seconds, 2),
            "extract_s": round(stats.encode_seconds, 2),
            "images_per_s": round(stats.images_per_s, 2),
            "wall_s": round(wall, 2),
        },
        "settings": plan.settings,
        "fingerprint": plan.fingerprint,
    }
    atomic_write_text(out / MANIFEST, json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    if not plan.options.keep_shards:
        shutil.rmtree(plan.work_dir, ignore_errors=True)
    from itrlab.data.precomp import open_precomp

    for split in plan.splits:  # the written layout must open like any precomp folder
        open_precomp(out, split, plan.options.captions_per_image)
    return manifest


Runner = Callable[[Plan], RunStats]


def extract_dataset(
    options: ExtractOptions, runner: Runner = run_local, log: Callable[[str], None] = lambda s: None
) -> dict[str, Any]:
    """Run a whole job (validate, compute the missing chunks with ``runner``, assemble), then derive
    the layouts ``options.pool`` asks for from the stored grid (:mod:`itrlab.extract.layouts`).

    Returns the manifest (``extract.json``), with ``"layouts"`` when some were asked for. A finished
    folder with the same settings is left as it is: nothing is computed and its manifest is
    returned with ``"up_to_date": True``.
    """
    started = time.perf_counter()
    planned = plan_splits(options, log)  # input errors before the output folder is created
    with extraction_lock(Path(options.out)):
        plan = prepare(options, log, planned)
        if plan.complete is not None:
            log(f"{options.out} already holds this extraction ({plan.n_images} images); nothing to extract")
            manifest = {**plan.complete, "up_to_date": True}
        else:
            log(
                f"extracting {plan.n_pending} images ("
                + ", ".join(f"{s} {len(ims)}" for s, ims in plan.splits.items())
                + f" in all) -> {options.out}, {options.dtype}"
            )
            manifest = assemble(plan, runner(plan), started)
        layouts = derive_layouts(plan.out, manifest, parse_pool(options.pool), log)
        return {**manifest, "layouts": layouts} if layouts else manifest


def summary_lines(manifest: dict[str, Any]) -> list[str]:
    """The job's closing report."""
    run, caps = manifest["run"], manifest["captions"]
    lines = [
        "splits: "
        + ", ".join(f"{s} {c['images']} images / {c['captions']} captions" for s, c in manifest["splits"].items())
        + f" ({manifest['dtype']})"
    ]
    lines.append(
        f"captions: {caps['dropped_captions']} dropped from {caps['truncated_images']} images with more than "
        f"{caps['per_image']}, {len(caps['excluded_images'])} images excluded, "
        f"{len(caps['padded_images'])} padded"
    )
    if caps.get("photos"):  # what the caption file covers of the image folder (formats read from --images)
        lines += Coverage.from_json(caps["photos"]).lines(manifest["source"]["images"])
    if manifest["bad_images"]:
        lines.append(
            f"bad images skipped ({len(manifest['bad_images'])}): "
            + "; ".join(f"{b['file_name']} ({b['problem']})" for b in manifest["bad_images"])
        )
    for name, layout in manifest.get("layouts", {}).items():
        lines.append(f"layout {name}/: {layout['regions']} region(s) per image, pooled from the grid")
    if manifest.get("up_to_date"):
        lines.append("nothing to extract: the output was already complete; when it was written:")
    lines.append(
        f"{run['images_this_run']} images extracted in {run['extract_s']:.1f} s: "
        f"{run['images_per_s']:.2f} images/s ({run['backend']}, {run['workers']} worker(s) x "
        f"{run['threads_per_worker']} thread(s); model load {run['model_load_s']:.1f} s; "
        f"wall {run['wall_s']:.1f} s)"
    )
    return lines
