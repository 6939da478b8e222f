"""Per-query ranks of a test split, kept as a small file so that a result can be re-analysed without its model.

Every training writes the test ranks of its best checkpoint (``test_ranks.npz`` in its run folder and as an artifact of
its MLflow run): a bootstrap over the test images recomputes any recall from them without loading a model. The file is a
``np.savez_compressed`` archive read with ``allow_pickle=False``:

* ``i2t``: int32 (N,) (read back in its own integer type), the 0-based rank of each test image's best-ranked own
  caption, the protocol's folds concatenated in image order;
* ``t2i``: int32 (cpi * N,), the 0-based rank of each caption's image;
* ``fold_sizes``: int64 (folds,), the images of each fold (summing to N); a rank counts the negatives of its own fold
  only, and a protocol's recall is the mean over its folds;
* ``captions_per_image``: int64 scalar;
* ``protocol``: the protocol's name (a 0-d unicode array).

DBL's MD is not kept: the recall table logged beside the ranks holds it.
"""

from __future__ import annotations

import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from itrlab.eval.ranking import Ranks
from itrlab.files import atomic_write_bytes

RANKS_FILE = "test_ranks.npz"
_KEYS = ("i2t", "t2i", "fold_sizes", "captions_per_image", "protocol")


class RankFileError(ValueError):
    """A ranks file that is not what :func:`save_ranks` writes; its message names the file and the fault."""


@dataclass(frozen=True, eq=False)
class QueryRanks:
    """A split's per-query ranks under one protocol (the fields of the file, see the module docstring)."""

    protocol: str
    captions_per_image: int
    fold_sizes: tuple[int, ...]
    i2t: np.ndarray
    t2i: np.ndarray

    @property
    def n_images(self) -> int:
        return int(self.i2t.shape[0])

    def folds(self) -> list[tuple[slice, slice]]:
        """Per fold: the slice of its images in ``i2t`` and of its captions in ``t2i``."""
        bounds, start = [], 0
        for size in self.fold_sizes:
            cpi = self.captions_per_image
            bounds.append((slice(start, start + size), slice(cpi * start, cpi * (start + size))))
            start += size
        return bounds

    def same_as(self, other: QueryRanks) -> bool:
        """True when both hold the same protocol, folds and ranks."""
        return (
            self.protocol == other.protocol
            and self.captions_per_image == other.captions_per_image
            and self.fold_sizes == other.fold_sizes
            and np.array_equal(self.i2t, other.i2t)
            and np.array_equal(self.t2i, other.t2i)
        )


def query_ranks(folds: Sequence[Ranks], protocol: str) -> QueryRanks:
    """The :class:`QueryRanks` of a protocol's folds (what :func:`itrlab.eval.rank_folds` returns)."""
    if not folds:
        raise ValueError("no folds to keep")
    cpi = {ranks.captions_per_image for ranks in folds}
    if len(cpi) != 1:
        raise ValueError(f"folds with different captions per image: {sorted(cpi)}")
    return QueryRanks(
        protocol=protocol,
        captions_per_image=cpi.pop(),
        fold_sizes=tuple(ranks.n_images for ranks in folds),
        i2t=np.concatenate([ranks.i2t for ranks in folds]).astype(np.int32),
        t2i=np.concatenate([ranks.t2i for ranks in folds]).astype(np.int32),
    )


def save_ranks(path: str | Path, folds: Sequence[Ranks], protocol: str) -> QueryRanks:
    """Write the ranks of ``folds`` under ``protocol`` to ``path`` (atomically); the ranks written."""
    ranks = query_ranks(folds, protocol)
    atomic_write_bytes(
        path,
        lambda file: np.savez_compressed(
            file,
            i2t=ranks.i2t,
            t2i=ranks.t2i,
            fold_sizes=np.asarray(ranks.fold_sizes, dtype=np.int64),
            captions_per_image=np.int64(ranks.captions_per_image),
            protocol=np.array(protocol),
        ),
    )
    return ranks


def load_ranks(path: str | Path) -> QueryRanks:
    """The ranks in ``path``, checked (:func:`checked_ranks`): RankFileError naming the file for anything
    :func:`save_ranks` does not write, a pickled object included."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as archive:
            missing = [key for key in _KEYS if key not in archive.files]
            if missing:
                raise RankFileError(f"not a ranks file: no {', '.join(missing)}")
            arrays = {key: archive[key] for key in _KEYS}
        return checked_ranks(**arrays)
    except RankFileError as err:
        raise RankFileError(f"{path}: {err}") from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as err:
        why = "it holds pickled objects, which are never loaded" if "allow_pickle" in str(err) else str(err)
        raise RankFileError(f"{path}: not a ranks file ({why})") from None


def checked_ranks(
    protocol: np.ndarray | str,
    captions_per_image: np.ndarray | int,
    fold_sizes: np.ndarray | Sequence[int],
    i2t: np.ndarray,
    t2i: np.ndarray,
) -> QueryRanks:
    """:class:`QueryRanks` of arrays read back (a ranks file, a results page's evidence), checked: RankFileError
    for a wrong dtype or shape, folds that do not fit the ranks, or a rank outside its fold's range."""
    i2t, t2i, sizes = np.asarray(i2t), np.asarray(t2i), np.asarray(fold_sizes)
    cpi, protocol = np.asarray(captions_per_image), np.asarray(protocol)
    for name, array in (("i2t", i2t), ("t2i", t2i), ("fold_sizes", sizes)):
        if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer):
            raise RankFileError(f"{name} must be a 1-d integer array, not {array.dtype} of shape {array.shape}")
    if cpi.ndim != 0 or not np.issubdtype(cpi.dtype, np.integer) or int(cpi) < 1:
        raise RankFileError(f"captions_per_image must be a positive integer, not {cpi!r}")
    if protocol.ndim != 0 or protocol.dtype.kind != "U":
        raise RankFileError("protocol must be a name")
    cpi = int(cpi)
    if sizes.size == 0 or (sizes < 1).any() or int(sizes.sum()) != i2t.size or t2i.size != cpi * i2t.size:
        raise RankFileError(
            f"fold sizes {sizes.tolist()} do not fit {i2t.size} image and {t2i.size} caption ranks "
            f"at {cpi} captions an image"
        )
    ranks = QueryRanks(str(protocol), cpi, tuple(int(size) for size in sizes), i2t, t2i)  # their own integer type
    for size, (images, captions) in zip(ranks.fold_sizes, ranks.folds(), strict=True):
        # a rank counts the fold's negatives: at most cpi * (size - 1) captions, size - 1 images
        if _out_of(ranks.i2t[images], cpi * (size - 1)) or _out_of(ranks.t2i[captions], size - 1):
            raise RankFileError(f"a rank outside its fold of {size} images")
    return ranks


def _out_of(ranks: np.ndarray, highest: int) -> bool:
    return bool(ranks.size) and (int(ranks.min()) < 0 or int(ranks.max()) > highest)
