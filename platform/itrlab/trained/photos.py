"""Which image a precomp split's row is, and where its photo is: retrieval you can look at.

A folder of the feature extraction (:mod:`itrlab.extract.job`) keeps ``{split}_ids.txt`` (each row's image id) and
``extract.json``, whose ``source`` names the photo folder and the caption source that maps an id to its file; a
pooled layout (:mod:`itrlab.extract.layouts`) keeps the ids, its grid's manifest one folder up. A folder without
ids (SCAN's precomp files, synthetic data) names its images by their row and has no photos.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from itrlab.data import PrecompSplit
from itrlab.errors import UserInputError
from itrlab.extract.image_paths import escape
from itrlab.extract.plan import MANIFEST
from itrlab.files import read_json

LAYOUT = "layout.json"  # a pooled layout's record (itrlab.extract.layouts); its grid's manifest is one folder up


@dataclass(frozen=True)
class SplitImages:
    """The images of one split: the id of each row, and (data extracted from photos) each row's photo."""

    ids: list[int]
    photos: list[Path | None] | None  # None: the data has no photos; an entry None: that photo is not there
    where: str  # what the ids come from, for messages

    def row_of(self, image_id: int) -> int:
        """The row of image ``image_id``; UserInputError (one line) for an id the split does not hold."""
        try:
            return self.ids.index(image_id)
        except ValueError:
            shown = ", ".join(map(str, self.ids[:3]))
            raise UserInputError(
                f"--image {image_id}: no such image in {self.where} ({len(self.ids):,} images, ids such as {shown})"
            ) from None

    def photo(self, row: int) -> Path | None:
        return self.photos[row] if self.photos is not None else None


def manifest_of(root: Path) -> Path | None:
    """The extraction manifest of the precomp folder ``root`` (its own, or its grid's for a pooled layout)."""
    for candidate in (root / MANIFEST, root.parent / MANIFEST if (root / LAYOUT).is_file() else None):
        if candidate is not None and candidate.is_file():
            return candidate
    return None


def photo_names(manifest: Path) -> tuple[Path, dict[int, str]] | None:
    """The photo folder the manifest's extraction read and each image id's file in it; None when the manifest
    names no source, or its caption source or photo folder is gone."""
    from itrlab.extract.readers import reader_of_source

    source = read_json(manifest, "extraction manifest").get("source") or {}
    folder = Path(source.get("images", ""))
    if not source.get("images") or not folder.is_dir():
        return None
    images = reader_of_source(source).images_of(source)  # read again by the format that read them
    if images is None:
        return None
    return folder, {image.image_id: image.file_name for image in images}


def split_images(split: PrecompSplit, with_photos: bool = True) -> SplitImages:
    """The ids of ``split``'s rows (its ``{split}_ids.txt``, else the rows' numbers) and, with ``with_photos``,
    their photos where the data came from photos."""
    ids_file = Path(split.root) / f"{split.split}_ids.txt"
    if not ids_file.is_file():
        return SplitImages(list(range(split.n_images)), None, f"split {split.split} of {split.root} (ids: rows)")
    ids = [int(line) for line in ids_file.read_text().split()]
    if len(ids) != split.n_images:
        raise UserInputError(f"{ids_file}: {len(ids):,} ids for {split.n_images:,} images; extract the data again")
    where = f"split {split.split} of {split.root} ({ids_file.name})"
    manifest = manifest_of(Path(split.root)) if with_photos else None
    found = photo_names(manifest) if manifest is not None else None
    if found is None:
        return SplitImages(ids, None, where)
    folder, names = found
    root = folder.resolve()
    # a name that leads out of the photo folder is no photo of the data set
    photos = [
        folder / names[i]
        if i in names and escape(folder, names[i], root) is None and (folder / names[i]).is_file()
        else None
        for i in ids
    ]
    return SplitImages(ids, photos, where)
