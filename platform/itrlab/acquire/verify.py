"""A copy of a data set held against its manifest: every file there, none more, each as recorded, and the split file
saying what the official lists say.

:func:`verify_folder` remembers its digests in the folder (``.digests.json``, as :mod:`itrlab.extract.digests` does), so
a file whose size and modification time are unchanged is not read again. :class:`Problems` gathers what differs, from
the folder and from an archive's listing, and says it on one line: the first few and their count.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from itrlab.acquire.manifest import STATE, DataManifest
from itrlab.errors import DataError

SHOWN = 4  # problems named in the one line; the rest are counted


@dataclass
class Problems:
    """What makes a copy differ from its manifest, by kind (paths inside the copy)."""

    altered: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    split: list[str] = field(default_factory=list)  # "<image> in <split>, officially <split>" and the like

    def __bool__(self) -> bool:
        return bool(self.altered or self.missing or self.extra or self.split)

    def merge(self, other: Problems) -> Problems:
        return Problems(
            sorted({*self.altered, *other.altered}),
            sorted({*self.missing, *other.missing}),
            sorted({*self.extra, *other.extra}),
            [*self.split, *other.split],
        )

    def items(self) -> list[str]:
        return [
            *(f"{path} altered" for path in self.altered),
            *(f"{path} missing" for path in self.missing),
            *(f"{path} extra" for path in self.extra),
            *self.split,
        ]

    def line(self, what: str, manifest: DataManifest) -> str:
        """``<what> does not match the <name> manifest: <n> problem(s): <the first few>``."""
        items = self.items()
        shown = ", ".join(items[:SHOWN]) + (f" and {len(items) - SHOWN:,} more" if len(items) > SHOWN else "")
        counts = ", ".join(
            f"{len(found):,} {kind}"
            for kind, found in (
                ("altered", self.altered),
                ("missing", self.missing),
                ("extra", self.extra),
                ("off the official split", self.split),
            )
            if found
        )
        return f"{what} does not match the {manifest.name} manifest: {counts}: {shown}"


def files_of(root: Path) -> tuple[list[str], list[str]]:
    """(regular files, other entries: links to nothing, sockets, ...) under ``root``, as POSIX paths relative to it;
    the folder's own digest record left out."""
    files, others = [], []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel == STATE or path.is_dir():
            continue
        (files if path.is_file() else others).append(rel)
    return files, others


def split_problems(path: Path, manifest: DataManifest) -> list[str]:
    """What the split file ``path`` says that the manifest's official lists do not (a DataError for a file the
    extraction could not read either)."""
    from itrlab.extract.captions import split_file_pairs

    official = manifest.official_split()
    given: dict[str, str] = {}
    problems = []
    try:
        pairs = split_file_pairs(path)
    except DataError as err:
        return [f"{manifest.split_file} unreadable ({err.problem})"]
    for key, split, _ in pairs:
        key = str(key)
        if key not in official:
            problems.append(f"{manifest.split_file} lists {key}, which no official list holds")
        elif key in given and given[key] != split:
            problems.append(f"{manifest.split_file} puts {key} in both {given[key]} and {split}")
        elif official[key] != split:
            problems.append(f"{manifest.split_file} puts {key} in {split}, officially {official[key]}")
        given.setdefault(key, split)
    left_out = sorted(set(official) - set(given))
    problems += [f"{manifest.split_file} leaves out {key} ({official[key]})" for key in left_out]
    return problems


def verify_folder(root: Path, manifest: DataManifest, listed: bool = True) -> Problems:
    """What differs between the folder ``root`` and ``manifest``: files missing, altered, extra (with ``listed``: the
    source's listing, since a staged copy holds only what was unpacked) and the split file against the official lists.
    Remembers the digests it computed in ``root``."""
    from itrlab.extract.digests import image_digests

    files, others = files_of(root)
    present = set(files)
    checked = {**manifest.checked_files(), **manifest.optional}
    problems = Problems(
        missing=sorted(manifest.required() - present),
        extra=sorted([*(present - manifest.required() - set(manifest.optional)), *others]) if listed else [],
    )
    names = sorted(present & set(checked))
    digests, _ = image_digests(root, names, root, cache=STATE)
    problems.altered = [name for name in names if digests[name] != checked[name]]
    if manifest.split_file in present:
        problems.split = split_problems(root / manifest.split_file, manifest)
    return problems


__all__ = ["Problems", "files_of", "split_problems", "verify_folder"]
