"""Stored arrays (``.npy``) checked before they are used: their header (a regular file, whole, of the expected dtype and
shape) on every open, and their content once: the sha256 of the file's bytes and whether every value is finite, in one
pass.

A pass reads the whole file (about 1 s for 460 MB), so its result is remembered, in the process and in
``.array_checks.json`` beside the arrays, by file name with the file's size, modification and change times
(nanoseconds) and inode: a file whose status is unchanged is not read again, as ``git status`` trusts stat (a program
cannot set the change time back). A folder that cannot be written keeps no record: its arrays are read once per
process.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from itrlab.errors import DataError
from itrlab.files import atomic_write_text, regular_file

CACHE = ".array_checks.json"
BLOCK = 1 << 22  # bytes read at a time
_seen: dict[tuple[str, tuple[int, ...]], ArrayContent] = {}  # this process's results, by path and status
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ArrayContent:
    """What one pass over an array file found: the sha256 of its bytes, and whether all its values are finite."""

    sha256: str
    finite: bool


def open_array(path: Path, shape: tuple[int, ...], kinds: str, what: str) -> np.ndarray:
    """The array in ``path``, memory-mapped: DataError naming the file unless it is a regular, whole ``.npy`` of
    ``shape`` whose dtype is of ``kinds`` (numpy's dtype kinds: ``f`` floating, ``iu`` integer); only the
    header is read."""
    if not path.exists():
        raise DataError(path, f"missing (the {what} are incomplete: re-run jobs/extract_features.py --text)")
    regular_file(path, what)
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DataError(path, f"unreadable or truncated ({str(exc)[:200]})") from None
    if array.dtype.kind not in kinds:
        allowed = {"f": "floating-point", "iu": "integer"}.get(kinds, kinds)
        raise DataError(path, f"dtype {array.dtype}; {what} are {allowed} numbers: extract them again")
    if tuple(array.shape) != tuple(shape):
        raise DataError(
            path, f"shape {tuple(array.shape)}, expected {tuple(shape)}: truncated or from another extraction"
        )
    return array


def _status_key(path: Path) -> tuple[int, ...]:
    status = regular_file(path, "array file")  # a FIFO would block the pass forever
    return (status.st_size, status.st_mtime_ns, status.st_ctime_ns, status.st_ino)


def _read_pass(path: Path) -> ArrayContent:
    """One pass over ``path``: the sha256 of every byte, and (a floating-point array) whether all are finite;
    DataError for a file that is not a ``.npy``."""
    try:
        return _read(path)
    except (OSError, ValueError) as exc:
        raise DataError(path, f"unreadable or not a .npy array ({str(exc)[:200]})") from None


def _read(path: Path) -> ArrayContent:
    digest, finite = hashlib.sha256(), True
    with path.open("rb") as handle:
        version = np.lib.format.read_magic(handle)
        header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        _, _, dtype = header(handle)
        offset = handle.tell()
        handle.seek(0)
        digest.update(handle.read(offset))
        itemsize = max(dtype.itemsize, 1)
        size = max(1, BLOCK // itemsize) * itemsize
        for block in iter(lambda: handle.read(size), b""):
            digest.update(block)
            if finite and dtype.kind == "f":
                whole = len(block) - len(block) % itemsize
                finite = bool(np.isfinite(np.frombuffer(block[:whole], dtype=dtype)).all())
    return ArrayContent(digest.hexdigest(), finite)


def _read_cache(path: Path) -> dict:
    try:
        cache = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):
        return {}
    return cache if isinstance(cache, dict) else {}


def array_content(path: Path) -> ArrayContent:
    """The sha256 and finiteness of the array file ``path`` (see the module docstring for when it is read)."""
    path = Path(path)
    key = _status_key(path)
    seen = _seen.get((str(path.resolve()), key))
    if seen is not None:
        return seen
    cache_file = path.parent / CACHE
    cache = _read_cache(cache_file)
    entry = cache.get(path.name)
    if (
        isinstance(entry, list)
        and len(entry) == len(key) + 2
        and tuple(entry[: len(key)]) == key
        and isinstance(entry[-2], str)
        and isinstance(entry[-1], bool)
    ):
        found = ArrayContent(entry[-2], entry[-1])
    else:
        found = _read_pass(path)
        cache[path.name] = [*key, found.sha256, found.finite]
        try:
            atomic_write_text(cache_file, json.dumps(cache, separators=(",", ":")))
        except OSError as err:  # a read-only data folder: the pass is remembered by this process alone
            _log.debug("no record of array checks in %s: %s", cache_file, err)
    _seen[(str(path.resolve()), key)] = found
    return found


__all__ = ["CACHE", "ArrayContent", "array_content", "open_array"]
