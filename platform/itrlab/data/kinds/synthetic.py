"""The ``synthetic`` kind: the seeded generator (:mod:`itrlab.data.synthetic`) writes the precomp layout under
``dataset.root`` on first use, from the spec of the ``dataset.synthetic`` section (size, seed, knobs).

Its sizes and feature shape come from the spec, so a config is checked (and a sweep dry-run) before the data
exists; ``synthetic.json``, written last, says it does.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from itrlab.data.kinds.registry import DatasetKind, DataSummary, register_kind
from itrlab.data.precomp import open_precomp
from itrlab.data.synthetic import MANIFEST, SyntheticSpec, generate_synthetic, synthetic_spec
from itrlab.errors import ConfigError


@register_kind("synthetic")
class SyntheticKind(DatasetKind):
    holds = "the precomp layout, generated on first use from the dataset.synthetic section (synthetic.json last)"
    generates = True
    shape_from = "the synthetic spec"

    @classmethod
    def check_section(cls, dataset) -> None:
        if dataset.synthetic is None:
            raise ValueError("a dataset of kind 'synthetic' needs a 'synthetic' section (size, seed, knobs)")

    def spec(self) -> SyntheticSpec:
        """The :class:`~itrlab.data.synthetic.SyntheticSpec` the section describes."""
        section = self.dataset.synthetic
        try:
            return synthetic_spec(section.size, **{"seed": section.seed, **section.knobs})
        except ConfigError as err:  # the generator names the knob as synthetic.<knob>
            raise ConfigError(f"dataset.{err.field}", err.value, err.allowed, err.hint) from None

    def on_disk(self) -> bool:
        return (Path(self.dataset.root) / MANIFEST).is_file()

    def prepare(self) -> None:
        generate_synthetic(self.dataset.root, self.spec())

    def summary(self) -> DataSummary:
        spec = self.spec()
        if spec.captions_per_image != self.dataset.captions_per_image:
            raise ConfigError(
                "dataset.captions_per_image",
                self.dataset.captions_per_image,
                f"the synthetic data has {spec.captions_per_image} captions per image",
            )
        sizes = {"train": spec.n_train, "val": spec.n_dev, "test": spec.n_test}
        done = self.on_disk()
        if not done:
            self.check_room(spec)
        return DataSummary(sizes, spec.captions_per_image, generated=not done)

    def check_room(self, spec: SyntheticSpec) -> None:
        """ConfigError when the data set to generate cannot fit this machine: its features on the disk that
        will hold ``dataset.root``, its largest split (generated in float32) in memory."""
        per_image = spec.n_regions * spec.feature_dim
        disk = (spec.n_train + spec.n_dev + spec.n_test) * per_image * (2 if spec.dtype == "float16" else 4)
        memory = max(spec.n_train, spec.n_dev, spec.n_test) * per_image * 4
        probe = Path(self.dataset.root).expanduser().resolve()
        while not probe.exists() and probe.parent != probe:
            probe = probe.parent
        free_disk = shutil.disk_usage(probe).free
        free_memory = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else None
        if disk > free_disk:
            raise ConfigError(
                "dataset.synthetic",
                self.dataset.synthetic.model_dump(),
                f"the synthetic data would need {disk / 1e9:.1f} GB of features on disk; {probe} has "
                f"{free_disk / 1e9:.1f} GB free",
            )
        if free_memory is not None and memory > free_memory:
            raise ConfigError(
                "dataset.synthetic",
                self.dataset.synthetic.model_dump(),
                f"generating it would need {memory / 1e9:.1f} GB of memory for its largest split; "
                f"{free_memory / 1e9:.1f} GB are available",
            )

    def shape(self) -> tuple[int, int]:
        spec = self.spec()
        return spec.n_regions, spec.feature_dim

    def open_split(self, role: str):
        return open_precomp(self.dataset.root, self.split_name(role), self.dataset.captions_per_image)
