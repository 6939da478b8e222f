"""Content digests of the images an extraction reads: what makes its output a cache of its inputs.

Each image's digest is the sha256 of its file, and the settings hold one digest over all (:func:`content_digest`).
Digests are remembered in ``{out}/.image_digests.json`` with each file's size and modification time (ns): a file
whose stat is unchanged is not read again, as ``git status`` trusts stat. :mod:`itrlab.acquire.verify` keeps a raw
copy's digests the same way.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

from itrlab.files import atomic_write_text, sha256_file

CACHE = ".image_digests.json"
UNREADABLE = "unreadable"  # the digest of a missing or unreadable file (the image scan reports it)


def _read_cache(path: Path) -> dict[str, list]:
    try:
        cache = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return cache if isinstance(cache, dict) else {}


def remembered_digests(folder: Path, names: Iterable[str], out: Path, cache: str = CACHE) -> dict[str, str]:
    """{file name: sha256} of the files of ``folder`` whose size and time are those remembered in ``{out}/{cache}``;
    reads no file but the record."""
    record = _read_cache(Path(out) / cache)
    known = {}
    for name in names:
        entry = record.get(name)
        if not (isinstance(entry, list) and len(entry) == 3):
            continue
        try:
            stat = (Path(folder) / name).stat()
        except OSError:
            continue
        if entry[:2] == [stat.st_size, stat.st_mtime_ns]:
            known[name] = entry[2]
    return known


def image_digests(
    images_dir: Path, names: Iterable[str], out: Path, cache: str = CACHE
) -> tuple[dict[str, str], list[str]]:
    """({file name: sha256}, the names whose content differs from the remembered digest).

    Reads only the files that are new to ``{out}/{cache}`` (default ``.image_digests.json``) or whose size or
    time changed, and writes the updated record back (``out`` must exist).
    """
    cache_path = Path(out) / cache
    cache = _read_cache(cache_path)
    digests: dict[str, str] = {}
    changed: list[str] = []
    updated = False
    for name in names:
        path = Path(images_dir) / name
        try:
            stat = path.stat()
            key = [stat.st_size, stat.st_mtime_ns]
            entry = cache.get(name)
            if isinstance(entry, list) and entry[:2] == key and len(entry) == 3:
                digests[name] = entry[2]
                continue
            digests[name] = sha256_file(path)
        except OSError:
            digests[name] = UNREADABLE
            continue
        if isinstance(entry, list) and len(entry) == 3 and entry[2] != digests[name]:
            changed.append(name)
        cache[name] = [*key, digests[name]]
        updated = True
    if updated:
        atomic_write_text(cache_path, json.dumps(cache, separators=(",", ":")))
    return digests, changed


def content_digest(digests: dict[str, str]) -> str:
    """One sha256 over every image's (file name, digest), in file-name order."""
    text = "\n".join(f"{name}\t{digests[name]}" for name in sorted(digests))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
