"""A data set's shape: what decides whether a published number may stand beside a result.

A paper's numbers compare with ours only on the paper's data (Flickr30K's 29,000 / 1,014 / 1,000 images, 5 captions
each, 36 x 2048 region features). A config's data set name proves nothing (a synthetic set renamed ``f30k_precomp``
is still synthetic), so the reports compare the shape read from the files: split sizes, captions per image, feature
shape, and whether itrlab generated the folder (``synthetic.json``). A published table's :class:`ShapeRequirement`
(``configs/paper/data/<name>.yaml``) has the same fields, its region features possibly ``any``: the papers' tables
require SCAN's 36 x 2048 regions, while published anchors of other methods stand beside results on the same images,
split, captions and protocol whatever the features.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from itrlab.data.precomp import inspect_precomp
from itrlab.data.synthetic import MANIFEST
from itrlab.errors import ConfigError


@dataclass(frozen=True)
class DataShape:
    """Split sizes (images), captions per image, region features, and whether the data are synthetic."""

    train_images: int
    val_images: int
    test_images: int
    captions_per_image: int
    regions: int
    feature_dim: int
    synthetic: bool

    def describe(self) -> str:
        """``29,000 / 1,014 / 1,000 images x 5 captions, 36 x 2048 features`` (+ ``, synthetic``)."""
        text = (
            f"{self.train_images:,} / {self.val_images:,} / {self.test_images:,} images x "
            f"{self.captions_per_image} captions, {self.regions} x {self.feature_dim} features"
        )
        return text + (", synthetic" if self.synthetic else "")

    def differences(self, other: DataShape) -> list[str]:
        """The fields in which this shape differs from ``other``, as ``name ours vs theirs``."""
        ours, theirs = asdict(self), asdict(other)
        return [f"{key.replace('_', ' ')} {ours[key]} vs {theirs[key]}" for key in ours if ours[key] != theirs[key]]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DataShape:
        return cls(**{key: data[key] for key in cls.__dataclass_fields__})


ANY = "any"  # a requirement's regions or feature_dim: any features
SIZES = ("train_images", "val_images", "test_images", "captions_per_image")
FEATURES = ("regions", "feature_dim")


@dataclass(frozen=True)
class ShapeRequirement:
    """The data a published table's numbers were measured on, which ours must have for them to stand
    beside ours: split sizes, captions per image and not synthetic always; region features exactly,
    or any (``None``, written ``any`` in the file) where the published rows used other features."""

    train_images: int
    val_images: int
    test_images: int
    captions_per_image: int
    regions: int | None
    feature_dim: int | None
    synthetic: bool

    def describe(self) -> str:
        """``6,000 / 1,000 / 1,000 images x 5 captions, any features`` (or ``36 x 2048 features``)."""
        features = (
            "any features"
            if self.regions is None and self.feature_dim is None
            else (f"{self.regions or ANY} x {self.feature_dim or ANY} features")
        )
        text = (
            f"{self.train_images:,} / {self.val_images:,} / {self.test_images:,} images x "
            f"{self.captions_per_image} captions, {features}"
        )
        return text + (", synthetic" if self.synthetic else "")

    def differences(self, shape: DataShape) -> list[str]:
        """The required fields in which ``shape`` (the trials' data) differs, as ``name ours vs theirs``."""
        ours, required = asdict(shape), asdict(self)
        return [
            f"{key.replace('_', ' ')} {ours[key]} vs {required[key]}"
            for key in required
            if required[key] is not None and ours[key] != required[key]
        ]

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str) -> ShapeRequirement:
        """The requirement of a data file's ``data`` (``where``: the file, for errors): sizes are positive
        integers, ``regions`` and ``feature_dim`` positive integers or ``any``, ``synthetic`` a boolean;
        ``description`` may say in words what the data are. Anything else is a ConfigError."""
        fields = [*SIZES, *FEATURES, "synthetic"]
        unknown = sorted(set(data) - {*fields, "description"})
        if unknown:
            raise ConfigError(
                f"{where}: {unknown[0]}",
                data[unknown[0]],
                f"a data shape has the keys {', '.join(fields)} and description",
            )
        values: dict[str, Any] = {}
        for key in fields:
            if key not in data:
                raise ConfigError(f"{where}: {key}", None, "a data shape names every one of " + ", ".join(fields))
            value = data[key]
            if key == "synthetic":
                if not isinstance(value, bool):
                    raise ConfigError(f"{where}: synthetic", value, "true or false")
            elif key in FEATURES and value == ANY:
                value = None
            elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
                allowed = "a positive integer" + (
                    f" or '{ANY}' (published rows on other features)" if key in FEATURES else ""
                )
                raise ConfigError(f"{where}: {key}", value, allowed)
            values[key] = value
        return cls(**values)


def data_shape(root: str | Path, splits: tuple[str, str, str], captions_per_image: int) -> DataShape:
    """The shape of the precomp folder ``root`` (``splits``: the train, val and test file prefixes),
    read from the feature files' headers and the caption line counts (nothing is loaded)."""
    train, val, test = (inspect_precomp(root, split, captions_per_image) for split in splits)
    return DataShape(
        train.n_images,
        val.n_images,
        test.n_images,
        captions_per_image,
        test.n_regions,
        test.feature_dim,
        (Path(root) / MANIFEST).is_file(),
    )
