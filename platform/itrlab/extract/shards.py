"""Chunks and shards: the unit of work, of resuming and of a Ray task.

A split's images are cut into chunks of ``chunk_size``; each finished chunk is a shard under the
output's work folder (``{split}-{n}.npz``, then ``{split}-{n}.json``, each written to a temporary
name and renamed): the JSON marks the shard done.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from itrlab.extract.captions import CocoImage
from itrlab.extract.image_encoder import FEATURE_DIM, N_REGIONS
from itrlab.extract.images import ImageSource, try_load_image
from itrlab.files import atomic_write_bytes, atomic_write_text


@dataclass(frozen=True)
class Chunk:
    """Consecutive images of one split; the unit of work, of resuming and of a Ray task."""

    split: str
    number: int
    images: tuple[CocoImage, ...]

    @property
    def name(self) -> str:
        return f"{self.split}-{self.number:05d}"


@dataclass
class ChunkResult:
    """Features of a chunk's readable images (``kept``: their positions in the chunk)."""

    split: str
    number: int
    kept: list[int]
    regions: np.ndarray  # (len(kept), 49, 1280) in the storage dtype
    global_features: np.ndarray  # (len(kept), 1280)
    bad: list[tuple[str, str]]  # (file name, problem)
    seconds: float


def encode_chunk(
    chunk: Chunk,
    sources: Sequence[ImageSource],
    encoder: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
    batch_size: int,
    dtype: str,
    on_batch: Callable[[int], None] | None = None,
) -> ChunkResult:
    """Decode and encode a chunk in batches (decoding the next batch while the model runs)."""
    start = time.perf_counter()
    n = len(sources)
    regions = np.empty((n, N_REGIONS, FEATURE_DIM), dtype=dtype)
    global_features = np.empty((n, FEATURE_DIM), dtype=dtype)
    kept: list[int] = []
    bad: list[tuple[str, str]] = []

    def decode(lo: int) -> list[tuple[np.ndarray | None, str | None]]:
        return [try_load_image(sources[i]) for i in range(lo, min(lo + batch_size, n))]

    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(decode, 0) if n else None
        for lo in range(0, n, batch_size):
            decoded = pending.result()
            pending = pool.submit(decode, lo + batch_size) if lo + batch_size < n else None
            batch, positions = [], []
            for offset, (pixels, problem) in enumerate(decoded):
                if pixels is None:
                    bad.append((sources[lo + offset].file_name, problem or "unreadable"))
                else:
                    batch.append(pixels)
                    positions.append(lo + offset)
            if batch:
                grid, pooled = encoder(np.stack(batch))
                rows = slice(len(kept), len(kept) + len(batch))
                regions[rows] = grid
                global_features[rows] = pooled
                kept.extend(positions)
            if on_batch is not None:
                on_batch(len(decoded))
    return ChunkResult(
        chunk.split,
        chunk.number,
        kept,
        regions[: len(kept)],
        global_features[: len(kept)],
        bad,
        time.perf_counter() - start,
    )


def write_shard(work_dir: Path, chunk: Chunk, result: ChunkResult) -> None:
    """``{name}.npz`` (features) then ``{name}.json`` (which images, bad ones): the JSON marks it done."""
    atomic_write_bytes(
        work_dir / f"{chunk.name}.npz",
        lambda f: np.savez(f, regions=result.regions, global_features=result.global_features),
    )
    meta = {
        "split": chunk.split,
        "number": chunk.number,
        "images": len(chunk.images),
        "kept": result.kept,
        "ids": [chunk.images[i].image_id for i in result.kept],
        "bad": [{"file_name": name, "id": _id_of(chunk, name), "problem": problem} for name, problem in result.bad],
        "seconds": round(result.seconds, 3),
        "dtype": str(result.regions.dtype),
    }
    atomic_write_text(work_dir / f"{chunk.name}.json", json.dumps(meta))


def _id_of(chunk: Chunk, file_name: str) -> int | None:
    return next((im.image_id for im in chunk.images if im.file_name == file_name), None)


def read_shard_meta(work_dir: Path, chunk: Chunk) -> dict[str, Any] | None:
    """The shard's metadata if the chunk is finished, else None."""
    meta_path, data_path = work_dir / f"{chunk.name}.json", work_dir / f"{chunk.name}.npz"
    if not (meta_path.is_file() and data_path.is_file()):
        return None
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if meta.get("images") != len(chunk.images):
        return None
    return meta
