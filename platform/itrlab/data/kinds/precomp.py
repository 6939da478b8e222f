"""The ``precomp`` kind: a folder in the SCAN precomp layout (:mod:`itrlab.data.precomp`), read as it is.

SCAN's Flickr30K and COCO features, and every folder the feature extraction writes (``jobs/extract_features.py``),
are of this kind: ``{split}_ims.npy`` and ``{split}_caps.txt`` per split under ``dataset.root``.
"""

from __future__ import annotations

from itrlab.data.kinds.registry import ROLES, DatasetKind, DataSummary, register_kind
from itrlab.data.precomp import inspect_precomp, open_precomp
from itrlab.errors import ConfigError, DataError, resolved_from


@register_kind("precomp")
class PrecompKind(DatasetKind):
    holds = "{split}_ims.npy and {split}_caps.txt per split (the SCAN precomp layout)"

    def summary(self) -> DataSummary:
        dataset = self.dataset
        if not dataset.root.is_dir():
            raise ConfigError(
                "dataset.root",
                str(dataset.root),
                f"must be an existing directory holding {{split}}_ims.npy and {{split}}_caps.txt"
                f"{resolved_from(dataset.root)}",
            )
        sizes, width = {}, None
        for role in ROLES:
            split = self.split_name(role)
            info = inspect_precomp(dataset.root, split, captions_per_image=None)
            width = width or (info.feature_dim, "train")
            if info.feature_dim != width[0]:
                raise DataError(
                    info.features_path,
                    f"features of width {info.feature_dim}, but the {width[1]} "
                    f"split's are {width[0]} wide: every split must come from one "
                    f"extractor",
                )
            ratio = info.n_captions / max(info.n_images, 1)
            if ratio != dataset.captions_per_image:
                raise ConfigError(
                    "dataset.captions_per_image",
                    dataset.captions_per_image,
                    f"split '{split}' in {dataset.root} has {info.n_captions} captions for "
                    f"{info.n_images} images ({ratio:g} per image)",
                )
            sizes[role] = info.n_images
        return DataSummary(sizes, dataset.captions_per_image, generated=False)

    def shape(self) -> tuple[int, int]:
        info = inspect_precomp(self.dataset.root, self.split_name("train"), None)
        return info.n_regions, info.feature_dim

    def open_split(self, role: str):
        return open_precomp(self.dataset.root, self.split_name(role), self.dataset.captions_per_image)
