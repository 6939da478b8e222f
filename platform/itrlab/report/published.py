"""Published numbers and the data they were measured on: the one rule that decides whether they may
stand beside ours.

A file of published numbers (a paper's own table, ``configs/paper/<name>.yaml``, or published anchors of
other methods, ``configs/paper/anchors/<name>.yaml``) names its data and test protocol::

    matches: {dataset: f30k_precomp, test_protocol: f30k_1k}

and ``configs/paper/data/<dataset>.yaml`` gives that data's shape (:class:`~itrlab.data.shape.ShapeRequirement`).
The numbers stand beside results only when the trials' data, read from the files (never the data set's
name), have that shape and the trials were tested under that protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from itrlab.config.loader import config_dir, read_yaml
from itrlab.data.shape import DataShape, ShapeRequirement


@dataclass(frozen=True)
class PublishedSource:
    """Where published numbers were measured: a name (the file), the data in words, the data set whose
    shape they need (``configs/paper/data/<dataset>.yaml``) and the test protocol."""

    name: str
    description: str  # "Flickr30K 1K test"
    dataset: str | None
    test_protocol: str | None  # f30k_1k, f8k_1k, coco_1k, coco_5k

    @staticmethod
    def fields(name: str, data: dict[str, Any]) -> dict[str, Any]:
        """The source's fields from a published file's ``data`` (its ``dataset`` line and ``matches``)."""
        matches = data.get("matches") or {}
        return {
            "name": name,
            "description": str(data.get("dataset", "")),
            "dataset": matches.get("dataset"),
            "test_protocol": matches.get("test_protocol"),
        }

    def data_shape(self) -> ShapeRequirement | None:
        """The shape of the data the numbers were measured on (None when the file names none)."""
        if not self.dataset:
            return None
        path = config_dir() / "paper" / "data" / f"{self.dataset}.yaml"
        return ShapeRequirement.from_dict(read_yaml(path, f"published data of {self.name}"), path.name)

    def comparable(self, shape: DataShape | None, test_protocol: str) -> str | None:
        """None when results on data of ``shape`` under ``test_protocol`` may stand beside these numbers,
        else why not (one line). The data are compared by their shape read from the files, never by
        the data set's name."""
        required = self.data_shape()
        if required is None or self.test_protocol is None:
            return f"not comparable: {self.name} does not say which data set and protocol its numbers use"
        if shape is None:
            return f"not comparable: the trials' data shape is unknown; the paper's numbers are {self.description}"
        differences = required.differences(shape)
        if differences:
            return (
                f"not comparable: the trials' data ({shape.describe()}) are not the paper's {self.description} "
                f"({required.describe()}): {'; '.join(differences)}"
            )
        if test_protocol != self.test_protocol:
            return (
                f"not comparable: the trials used test protocol {test_protocol}; the paper's numbers are "
                f"{self.description} ({self.test_protocol})"
            )
        return None
