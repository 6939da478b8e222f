"""Which photos of an image folder a caption file covers: photos it does not list (left out: no captions) and
photos it lists that the folder lacks, each counted and the first few named, since a folder and a caption file
come from different places. A folder without a photo, or a caption file that lists none of its photos, is one
:class:`~itrlab.errors.DataError` before anything is decoded. A photo is a file under the folder, sub-folders
included, whose suffix Pillow opens; names compare as paths inside the folder (``./a.jpg`` is ``a.jpg``).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from itrlab.errors import DataError

SHOWN = 5  # names listed of each kind
NAMED_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")  # the suffixes an error about a folder without photos names


@functools.cache
def photo_suffixes() -> frozenset[str]:
    """The file suffixes Pillow opens (``.jpg``, ``.png``, ``.webp``, ...), lower case."""
    from PIL import Image

    Image.init()
    return frozenset(suffix.lower() for suffix, kind in Image.registered_extensions().items() if kind in Image.OPEN)


def normal_name(name: str) -> str:
    """A listed file name as a path inside the folder, ``/``-separated (``./a.jpg`` and ``a.jpg`` are one)."""
    return PurePosixPath(name.replace("\\", "/")).as_posix()


def photo_files(folder: Path) -> list[str]:
    """The photos under ``folder``, as sorted ``/``-separated paths inside it (hidden files and folders left out)."""
    suffixes = photo_suffixes()
    found = []
    for parent, folders, files in os.walk(folder):
        folders[:] = [name for name in folders if not name.startswith(".")]
        inside = Path(parent).relative_to(folder)
        found += [
            (inside / name).as_posix()
            for name in files
            if not name.startswith(".") and Path(name).suffix.lower() in suffixes
        ]
    return sorted(found)


def shown(names: list[str], total: int) -> str:
    """The first :data:`SHOWN` of ``names``, with how many more there are."""
    text = ", ".join(names[:SHOWN])
    return text + (f" and {total - SHOWN} more" if total > SHOWN else "")


@dataclass(frozen=True)
class Coverage:
    """What a caption file covers of an image folder."""

    photos: int  # photos in the folder
    listed: int  # images the caption file lists
    without_captions: int  # photos of the folder the caption file does not list
    without_captions_first: list[str]
    without_photos: int  # images the caption file lists that the folder does not hold
    without_photos_first: list[str]

    def to_json(self) -> dict[str, Any]:
        return {
            "photos_in_folder": self.photos,
            "listed_images": self.listed,
            "photos_without_captions": self.without_captions,
            "photos_without_captions_first": self.without_captions_first,
            "captions_without_photos": self.without_photos,
            "captions_without_photos_first": self.without_photos_first,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Coverage:
        """:meth:`to_json`'s inverse (an extraction's manifest)."""
        return cls(
            int(data["photos_in_folder"]),
            int(data["listed_images"]),
            int(data["photos_without_captions"]),
            [str(name) for name in data["photos_without_captions_first"]],
            int(data["captions_without_photos"]),
            [str(name) for name in data["captions_without_photos_first"]],
        )

    def lines(self, folder: Path | str) -> list[str]:
        """What the report says: the folder's photos against the listing, and each kind of mismatch named."""
        lines = [
            f"photos: {self.photos} in {folder}, {self.photos - self.without_captions} of them listed in the caption "
            f"file; {self.without_captions} not listed (no captions), {self.without_photos} listed but not in the "
            f"folder"
        ]
        if self.without_captions:
            lines.append(
                f"{self.without_captions} photos without captions, left out (the caption file does not list them): "
                + shown(self.without_captions_first, self.without_captions)
            )
        if self.without_photos:
            lines.append(
                f"{self.without_photos} captioned photos not in the folder (missing images: the extraction stops "
                f"on them unless --skip-bad): " + shown(self.without_photos_first, self.without_photos)
            )
        return lines


def coverage(folder: Path, listed: Iterable[str], listing: Path) -> Coverage:
    """What the caption file ``listing``, which names the images ``listed`` (file names inside ``folder``, in its
    order), covers of the photos in ``folder``; a DataError when the folder holds no photo, or when the file lists
    none of them."""
    photos = photo_files(folder)
    if not photos:
        raise DataError(folder, f"holds no photo (no file whose suffix Pillow opens: {', '.join(NAMED_SUFFIXES)}, ...)")
    names = list(dict.fromkeys(normal_name(name) for name in listed))
    held = set(photos)
    missing = [name for name in names if name not in held]
    if names and len(missing) == len(names):
        raise DataError(
            listing,
            f"lists none of the {len(photos)} photos in {folder}: it names {shown(names, len(names))}; the folder "
            f"holds {shown(photos, len(photos))} (--images names the folder the caption file's file names are in)",
        )
    unlisted = sorted(held - set(names))
    return Coverage(len(photos), len(names), len(unlisted), unlisted[:SHOWN], len(missing), missing[:SHOWN])
