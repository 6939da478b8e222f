"""Dataset kinds by name: the values a config's ``dataset.kind`` may take, and what each does with its data.

A kind is how a data set's files come to be under ``dataset.root`` and how they are checked and opened: read as they
are (``precomp``), generated on first use (``synthetic``), or anything a new kind's module says
(docs/adding-a-dataset.md). Each kind's module registers its class with ``@register_kind("name")``; the config
checks, training and the dry run call the kind's methods and name no kind. A kind is built from the typed
``dataset`` section and reads its fields; this layer imports no config class. Its registries are instances of
:class:`itrlab.registry.Registry`, as are those of the other named parts in their layers' ``registry.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from itrlab.errors import ConfigError
from itrlab.registry import Registry

ROLES = ("train", "val", "test")


@dataclass(frozen=True)
class DataSummary:
    """Sizes of the three splits, known before any feature is read."""

    n_images: dict[str, int]  # by role: train, val, test
    captions_per_image: int
    generated: bool  # data its kind writes on first use, not written yet

    @property
    def n_train_captions(self) -> int:
        return self.n_images["train"] * self.captions_per_image


class DatasetKind:
    """One on-disk layout of a data set, bound to a ``dataset`` section (``self.dataset``). Subclasses set ``name`` (by
    :func:`register_kind`), ``holds`` (what ``dataset.root`` holds, in words), ``generates`` (whether the kind writes
    its files on first use) and ``shape_from``, and implement :meth:`summary`, :meth:`shape` and :meth:`open_split`."""

    name: ClassVar[str] = ""
    holds: ClassVar[str] = ""
    generates: ClassVar[bool] = False
    shape_from: ClassVar[str] = "the data here"  # where :meth:`shape` reads it, for the dry run's words

    def __init__(self, dataset: Any):
        self.dataset = dataset

    @classmethod
    def check_section(cls, dataset: Any) -> None:
        """ValueError for a ``dataset`` section this kind cannot read (when the config is typed; no file read)."""

    def on_disk(self) -> bool:
        """Whether the files are under ``root`` (a kind that generates them may not have yet)."""
        return True

    def prepare(self) -> None:
        """Write the files the kind makes on first use (idempotent); a kind read as it is has nothing to do."""

    def summary(self) -> DataSummary:
        """The splits' sizes from headers or a spec, cheaply (before Ray, MLflow or training start);
        ConfigError or DataError for data that does not fit the section."""
        raise NotImplementedError

    def shape(self) -> tuple[int, int]:
        """(regions, feature width) of the image features, without reading them (the sweep's dry run)."""
        raise NotImplementedError

    def open_split(self, role: str):
        """The split of ``role`` (train, val, test) opened and checked: a
        :class:`~itrlab.data.precomp.PrecompSplit` (or an object with its interface)."""
        raise NotImplementedError

    def split_name(self, role: str) -> str:
        """The file prefix of ``role``'s split (``dataset.splits``)."""
        return getattr(self.dataset.splits, role)


DATASET_KINDS: Registry[type[DatasetKind]] = Registry("dataset kind")
register_kind = DATASET_KINDS.register


class StoredFeatures:
    """Features computed once and stored beside a data set's files, read by a run instead of computed at every
    step (the text model's token states: :mod:`itrlab.data.text_features`); registered with
    ``@register_stored("name")``. ``wanted(config)``: whether a config reads them; ``check(config, kind)``: that
    they are there, whole and of this data (a DataError naming the file), before anything starts."""

    name: ClassVar[str] = ""

    @classmethod
    def wanted(cls, config: Any) -> bool:
        raise NotImplementedError

    @classmethod
    def check(cls, config: Any, kind: DatasetKind) -> None:
        raise NotImplementedError


STORED_FEATURES: Registry[type[StoredFeatures]] = Registry("stored features", plural="stored features")
register_stored = STORED_FEATURES.register


def kind_of(dataset: Any) -> DatasetKind:
    """The registered kind of a typed ``dataset`` section, bound to it."""
    try:
        cls = DATASET_KINDS[dataset.kind]
    except KeyError:
        raise ConfigError("dataset.kind", dataset.kind, DATASET_KINDS.unknown(dataset.kind)) from None
    return cls(dataset)


__all__ = [
    "DATASET_KINDS",
    "ROLES",
    "STORED_FEATURES",
    "DataSummary",
    "DatasetKind",
    "StoredFeatures",
    "kind_of",
    "register_kind",
    "register_stored",
]
