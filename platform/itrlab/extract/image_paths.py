"""Image names that stay inside their image folder.

A split list, a token file or a COCO caption file names each photo by a path relative to the data set's
image folder. A name that is absolute, holds a ``..`` component, or leads through a symbolic link to a
file outside the folder would make feature extraction read a photo that is not the data set's (and put
its features under the data set's name): such a name is refused with one
:class:`~itrlab.errors.DataError` naming the file that lists it (and the line), before anything is read
or written.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from itrlab.errors import DataError


def escape(images_dir: Path, name: str, root: Path | None = None) -> str | None:
    """How ``name`` leaves ``images_dir`` (``root``: the folder resolved, when the caller has it), or None
    when it stays inside."""
    parts = PurePosixPath(name.replace("\\", "/")).parts
    if name.startswith(("/", "\\")) or Path(name).is_absolute():
        return "an absolute path"
    if ".." in parts:
        return "a path through '..'"
    root = root or images_dir.resolve()
    target = (images_dir / name).resolve()
    if target != root and root not in target.parents:
        return f"a link to {target}, outside it"
    return None


def check_inside(images_dir: Path, names: Iterable[tuple[str, int | None]], listing: Path) -> None:
    """A DataError naming ``listing`` (the file that names the images) and the line of the first of
    ``names`` (name, line or None) that is not a file inside ``images_dir``."""
    root = images_dir.resolve()
    for name, line in names:
        how = escape(images_dir, name, root)
        if how is not None:
            raise DataError(
                listing,
                f"the image {name!r} is outside the image folder {images_dir} ({how}); "
                f"name images by their path inside that folder",
                line=line,
            )
