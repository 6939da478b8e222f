"""A data set's shape: what decides whether a published number may stand beside a result.

A paper's numbers are comparable with ours only on the paper's data: Flickr30K's 29,000 / 1,014 /
1,000 images with 5 captions each and 36 x 2048 region features, say. The data set's *name* in a
config proves nothing (a synthetic set renamed ``f30k_precomp`` is still synthetic), so the reports
compare the shape read from the files themselves: the split sizes, the captions per image, the
feature shape, and whether the folder is one itrlab generated (its ``synthetic.json``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from itrlab.data.precomp import inspect_precomp
from itrlab.data.synthetic import MANIFEST


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
        text = (f"{self.train_images:,} / {self.val_images:,} / {self.test_images:,} images x "
                f"{self.captions_per_image} captions, {self.regions} x {self.feature_dim} features")
        return text + (", synthetic" if self.synthetic else "")

    def differences(self, other: "DataShape") -> list[str]:
        """The fields in which this shape differs from ``other``, as ``name ours vs theirs``."""
        ours, theirs = asdict(self), asdict(other)
        return [f"{key.replace('_', ' ')} {ours[key]} vs {theirs[key]}" for key in ours if ours[key] != theirs[key]]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "DataShape":
        return cls(**{key: data[key] for key in cls.__dataclass_fields__})


def data_shape(root: str | Path, splits: tuple[str, str, str], captions_per_image: int) -> DataShape:
    """The shape of the precomp folder ``root`` (``splits``: the train, val and test file prefixes),
    read from the feature files' headers and the caption line counts (nothing is loaded)."""
    train, val, test = (inspect_precomp(root, split, captions_per_image) for split in splits)
    return DataShape(train.n_images, val.n_images, test.n_images, captions_per_image, test.n_regions,
                     test.feature_dim, (Path(root) / MANIFEST).is_file())
