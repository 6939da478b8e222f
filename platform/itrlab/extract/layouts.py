"""Region layouts derived from a stored 7x7 grid: fewer regions per image, no second pass over the images.

A layout ``GxG`` (``G`` < 7) average-pools each image's grid of 1280-d cells to G x G regions, row-major, with the
bins of ``torch.nn.functional.adaptive_avg_pool2d`` (rows ``floor(i * 7 / G)`` to ``ceil((i + 1) * 7 / G)``);
``1x1`` is the mean of the 49 cells. Pooling runs in float32 and is stored in the grid's dtype. Each layout is a
precomp folder ``{out}/pool{G}x{G}/`` with copies of the grid's captions and ids and ``layout.json`` written last
(the grid's fingerprint, the bins): a layout of another grid is derived again.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from itrlab.errors import UserInputError
from itrlab.extract.image_encoder import GRID
from itrlab.files import atomic_write_text

LAYOUT_FILE = "layout.json"
_SIZE = re.compile(r"^([1-9])x([1-9])$")
_ROWS_PER_READ = 512  # images pooled per read of the grid


def layout_name(size: int) -> str:
    return f"pool{size}x{size}"


def layout_folders(out: Path) -> list[Path]:
    """The derived layout folders under an extraction's output folder."""
    return sorted(p for p in Path(out).glob("pool*x*") if p.is_dir() and re.fullmatch(r"pool\dx\d", p.name))


def parse_pool(text: str | Sequence[int] | None) -> tuple[int, ...]:
    """``"3x3,1x1"`` -> (3, 1): square layouts smaller than the grid, each once."""
    if text is None or text == "":
        return ()
    if not isinstance(text, str):
        sizes = tuple(int(size) for size in text)
    else:
        sizes = []
        for part in (p.strip() for p in text.split(",")):
            match = _SIZE.match(part)
            if not match or match.group(1) != match.group(2):
                raise UserInputError(f"--pool: got {part!r}; expected square layouts such as 3x3,2x2,1x1")
            sizes.append(int(match.group(1)))
        sizes = tuple(sizes)
    bad = [size for size in sizes if not 1 <= size < GRID]
    if bad:
        raise UserInputError(
            f"--pool: {bad[0]}x{bad[0]} is not smaller than the {GRID}x{GRID} grid; "
            f"allowed: 1x1 to {GRID - 1}x{GRID - 1}"
        )
    if len(set(sizes)) != len(sizes):
        raise UserInputError(f"--pool: a layout appears twice in {text!r}")
    return sizes


def pool_bins(size: int, grid: int = GRID) -> list[tuple[int, int]]:
    """The [start, stop) cell range of each of ``size`` bins along one side (adaptive pooling)."""
    return [(math.floor(i * grid / size), math.ceil((i + 1) * grid / size)) for i in range(size)]


def pool_regions(regions: np.ndarray, size: int, grid: int = GRID) -> np.ndarray:
    """(N, grid*grid, D) row-major cells -> (N, size*size, D) float32 bin means, row-major."""
    n, cells, dim = regions.shape
    if cells != grid * grid:
        raise ValueError(f"expected {grid * grid} regions (a {grid}x{grid} grid), got {cells}")
    cube = np.asarray(regions, dtype=np.float32).reshape(n, grid, grid, dim)
    bins = pool_bins(size, grid)
    pooled = [cube[:, r0:r1, c0:c1].mean(axis=(1, 2)) for r0, r1 in bins for c0, c1 in bins]
    return np.stack(pooled, axis=1)


def _record(manifest: dict[str, Any], size: int) -> dict[str, Any]:
    return {
        "grid_fingerprint": manifest["fingerprint"],
        "grid": [GRID, GRID],
        "layout": [size, size],
        "regions": size * size,
        "bins": [list(b) for b in pool_bins(size)],
        "dtype": manifest["dtype"],
        "pooling": "mean over each bin (adaptive average pooling), float32, stored in the grid's dtype",
    }


def _derive(out: Path, folder: Path, splits: Sequence[str], size: int) -> None:
    folder.mkdir(exist_ok=True)
    (folder / LAYOUT_FILE).unlink(missing_ok=True)
    for split in splits:
        grid = np.load(out / f"{split}_ims.npy", mmap_mode="r")
        n, _, dim = grid.shape
        tmp = folder / f"{split}_ims.npy.tmp"
        pooled = np.lib.format.open_memmap(tmp, mode="w+", dtype=grid.dtype, shape=(n, size * size, dim))
        for lo in range(0, n, _ROWS_PER_READ):
            pooled[lo : lo + _ROWS_PER_READ] = pool_regions(grid[lo : lo + _ROWS_PER_READ], size)
        pooled.flush()
        del pooled, grid
        os.replace(tmp, folder / f"{split}_ims.npy")
        for name in (f"{split}_caps.txt", f"{split}_ids.txt"):
            shutil.copyfile(out / name, folder / name)


def derive_layouts(
    out: str | Path, manifest: dict[str, Any], sizes: Sequence[int], log: Callable[[str], None] = lambda s: None
) -> dict[str, dict[str, Any]]:
    """Write each ``pool{G}x{G}`` layout of a finished extraction that is missing or stale.

    Returns {folder name: its ``layout.json``}. Reads the stored grid only, never the images.
    """
    from itrlab.data.precomp import open_precomp

    out = Path(out)
    splits = list(manifest["splits"])
    written: dict[str, dict[str, Any]] = {}
    for size in sizes:
        folder, record = out / layout_name(size), _record(manifest, size)
        try:
            current = json.loads((folder / LAYOUT_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            current = None
        if current != record:
            _derive(out, folder, splits, size)
            for split in splits:
                open_precomp(folder, split, manifest["captions"]["per_image"])
            atomic_write_text(folder / LAYOUT_FILE, json.dumps(record, indent=1) + "\n")
            log(f"layout {size}x{size} ({size * size} region(s)) derived from the grid -> {folder}")
        written[folder.name] = record
    return written
