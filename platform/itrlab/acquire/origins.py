"""Where a data set's raw files come from: a folder, a zip or tar archive of it, or an http(s) URL of such an archive
(:func:`classify`); and the copy of what a manifest names into a staging folder (:func:`unpack`).

An archive may hold the data set's folder or its contents: the members' common top folder is left out when it is not one
of the data set's own names (:func:`data_root`; so for a folder holding only the data set's folder). Only the paths the
manifest names are written, each under the staging folder: a member with another name (``../x``, an absolute path, a
file the data set lacks) or that is not a regular file is an extra, reported and never unpacked.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import stat
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from itrlab.errors import UserInputError, resolved_from

URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
ALLOWED = "the data set's folder, a zip or tar archive of it, or an http(s) URL of such an archive"


@dataclass(frozen=True)
class Member:
    """A file of a source: its path inside the data set's folder, whether it is a regular file, its size."""

    name: str
    regular: bool
    size: int


class Source:
    """A folder or an archive of one data set: ``members()`` (the data set's root prefix already left out) and
    ``open(member)`` for reading one. ``kind``: what copying it is called (``copy``, ``unpack``)."""

    kind = "unpack"

    def __init__(self, path: Path):
        self.path = path
        self.prefix = ""

    def entries(self) -> list[Member]:
        raise NotImplementedError

    def reader(self, name: str) -> contextlib.AbstractContextManager[BinaryIO]:
        raise NotImplementedError

    def members(self, top_level: set[str]) -> list[Member]:
        entries = self.entries()
        self.prefix = data_root([m.name for m in entries], top_level)
        cut = len(self.prefix)  # every entry starts with it
        return [Member(m.name[cut:], m.regular, m.size) for m in entries]

    def open(self, member: Member) -> contextlib.AbstractContextManager[BinaryIO]:
        return self.reader(self.prefix + member.name)

    def close(self) -> None:
        pass


class FolderSource(Source):
    kind = "copy"

    def entries(self) -> list[Member]:
        found = []
        for path in sorted(self.path.rglob("*")):
            if path.is_dir():
                continue
            regular = path.is_file()
            found.append(Member(path.relative_to(self.path).as_posix(), regular, path.stat().st_size if regular else 0))
        return found

    def reader(self, name: str) -> contextlib.AbstractContextManager[BinaryIO]:
        return (self.path / name).open("rb")


class ZipSource(Source):
    def __init__(self, path: Path):
        super().__init__(path)
        self.archive = zipfile.ZipFile(path)
        self._names = {_clean(info.filename): info for info in self.archive.infolist()}

    def entries(self) -> list[Member]:
        return [
            Member(_clean(info.filename), not stat.S_ISLNK(info.external_attr >> 16), info.file_size)
            for info in self.archive.infolist()
            if not info.is_dir()
        ]

    def reader(self, name: str) -> contextlib.AbstractContextManager[BinaryIO]:
        return self.archive.open(self._names[name])

    def close(self) -> None:
        self.archive.close()


class TarSource(Source):
    def __init__(self, path: Path):
        super().__init__(path)
        self.archive = tarfile.open(path, "r:*")  # reads the first header; the listing reads the whole archive
        self._members: dict[str, tarfile.TarInfo] = {}

    def entries(self) -> list[Member]:
        self._members = {_clean(m.name): m for m in self.archive.getmembers() if not m.isdir()}
        return [Member(name, m.isfile(), m.size) for name, m in self._members.items()]

    def reader(self, name: str) -> contextlib.AbstractContextManager[BinaryIO]:
        handle = self.archive.extractfile(self._members[name])
        if handle is None:
            raise UserInputError(f"{self.path}: {name} is not a regular file")
        return handle

    def close(self) -> None:
        self.archive.close()


def _clean(name: str) -> str:
    """An archive member's name as a POSIX path without a leading ``./``."""
    while name.startswith("./"):
        name = name[2:]
    return name


def data_root(names: list[str], top_level: set[str]) -> str:
    """The prefix (``"flickr8k/"``, or ``""``) that leads from an archive's or a folder's top to the data set's
    folder: the members' one common top folder, as long as it is none of the data set's own top-level names."""
    prefix = ""
    while names:
        tops = {PurePosixPath(name).parts[0] for name in names}
        if len(tops) != 1 or any(len(PurePosixPath(name).parts) < 2 for name in names):
            break
        (top,) = tops
        if top in top_level:
            break
        prefix += f"{top}/"
        names = [name[len(top) + 1 :] for name in names]
    return prefix


def classify(given: str) -> str | Source:
    """What ``--from`` names: an http(s) URL (returned as it is), a folder or an archive (a :class:`Source`);
    anything else is one UserInputError, before anything is read or written."""
    if URL.match(given):
        if given.split("://", 1)[0].lower() not in ("http", "https"):
            raise UserInputError(f"--from {given}: only http(s) URLs are downloaded; give {ALLOWED}")
        return given
    path = Path(given).expanduser()
    if path.is_dir():
        return FolderSource(path)
    if path.is_file():
        try:
            if zipfile.is_zipfile(path):
                return ZipSource(path)
            if tarfile.is_tarfile(path):
                return TarSource(path)
        except (OSError, EOFError, zipfile.BadZipFile, tarfile.TarError) as err:
            raise UserInputError(f"--from {given}: cannot read the archive ({err}){resolved_from(path)}") from None
        raise UserInputError(f"--from {given}: a file that is neither a zip nor a tar archive; give {ALLOWED}")
    if path.exists():
        raise UserInputError(f"--from {given}: neither a folder nor a file; give {ALLOWED}")
    raise UserInputError(
        f"--from {given}: no such folder or file{resolved_from(path)}, nor an http(s) URL; give {ALLOWED}"
    )


def archive_source(path: Path) -> Source:
    """The archive downloaded to ``path``, as a Source (one line for a file that is no archive)."""
    source = classify(str(path))
    if not isinstance(source, Source) or isinstance(source, FolderSource):
        raise UserInputError(f"{path}: the download is neither a zip nor a tar archive")
    return source


def unpack(
    source: Source,
    members: list[Member],
    wanted: set[str],
    staging: Path,
    done: Callable[[str], bool],
    progress: Callable[[int], object] = lambda n: None,
) -> tuple[int, int]:
    """Write the regular ``members`` whose names are ``wanted`` under ``staging`` (a file ``done`` says is
    already there as recorded is left as it is); returns (files written, bytes written)."""
    written = size = 0
    for member in members:
        if not member.regular or member.name not in wanted:
            continue
        target = staging / member.name
        if not done(member.name):
            target.parent.mkdir(parents=True, exist_ok=True)
            with source.open(member) as reader, open(target, "wb") as writer:
                shutil.copyfileobj(reader, writer, 1 << 20)
            written += 1
            size += member.size
        progress(1)
    return written, size


@contextlib.contextmanager
def opened(source: Source) -> Iterator[Source]:
    try:
        yield source
    finally:
        source.close()


__all__ = [
    "ALLOWED",
    "FolderSource",
    "Member",
    "Source",
    "TarSource",
    "ZipSource",
    "archive_source",
    "classify",
    "data_root",
    "opened",
    "unpack",
]
