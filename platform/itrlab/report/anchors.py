"""Published anchors: results of other methods on the trials' data set and test protocol, shown as reference rows
under the sweep's table.

Anchors (``table.anchors: <name>``, ``configs/paper/anchors/<name>.yaml``) are earlier methods measured on the
same images, split, captions and protocol, usually with other features: they orient a reader and take part in
nothing else (no difference, headline or plot). They appear only under :mod:`itrlab.report.published`'s rule; a
file with ``regions: any`` lets every row say which features it used. The file::

    dataset: Flickr8K 1K test (official split, 5 captions per image)
    matches: {dataset: flickr8k_precomp, test_protocol: f8k_1k}
    rows:
      "UVS (Kiros et al. 2014)":
        source: "arXiv 1411.2539, Table 1, row 'Our model (OxfordNet)'"  # where the numbers were read
        features: "VGG-19 fc7, one vector per image"
        model: "dual encoder: LSTM over words, linear image projection, cosine score"
        i2t_R1: 18.0   # and i2t_R5, i2t_R10, t2i_R1, t2i_R5, t2i_R10, i2t_medr, t2i_medr as printed

Only numbers read in the paper's own table belong there; ``rsum`` is computed, never typed in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from itrlab.config.loader import config_dir, did_you_mean, read_yaml
from itrlab.config.sweep import SweepSpec
from itrlab.data.shape import DataShape
from itrlab.errors import ConfigError
from itrlab.eval.names import RECALLS
from itrlab.report.published import PublishedSource

RANKS = ("i2t_medr", "t2i_medr")  # the median ranks, where the paper prints them
WORDS = ("source", "features", "model")  # what every row says in words


@dataclass(frozen=True)
class Anchor:
    """One published row: its name, where it was read, its image features, the kind of model, and its
    numbers as printed (``rsum`` added when all six recalls are there)."""

    name: str
    source: str
    features: str
    model: str
    numbers: dict[str, float]

    def note(self) -> str:
        """The report's note cell: ``published, other features: VGG-19 fc7; <model>; <source>``."""
        return f"published, other features: {self.features}; {self.model}; {self.source}"


@dataclass(frozen=True)
class AnchorSet(PublishedSource):
    """The anchors of ``configs/paper/anchors/<name>.yaml`` and the data they were measured on."""

    rows: tuple[Anchor, ...] = field(default_factory=tuple)


def _anchor(name: str, row: object, where: str) -> Anchor:
    if not isinstance(row, dict):
        raise ConfigError(where, row, f"a row is a mapping of {', '.join(WORDS)} and the numbers {', '.join(RECALLS)}")
    keys = [*WORDS, *RECALLS, *RANKS]
    for key, value in row.items():
        if key not in keys:
            raise ConfigError(
                f"{where}.{key}",
                value,
                f"a row's keys are {', '.join(keys)} (rsum is computed)",
                did_you_mean(str(key), keys),
            )
    words = {}
    for key in WORDS:
        if not isinstance(row.get(key), str) or not row[key].strip():
            raise ConfigError(
                f"{where}.{key}",
                row.get(key),
                "a non-empty line: every published row says where it "
                "was read (paper, table, row), its image features and the kind of model",
            )
        words[key] = row[key].strip()
    numbers: dict[str, float] = {}
    for key in (*RECALLS, *RANKS):
        if key not in row:
            continue
        value = row[key]
        low, high = (0.0, 100.0) if key in RECALLS else (1.0, math.inf)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            raise ConfigError(
                f"{where}.{key}",
                value,
                "a recall in percent, 0 to 100" if key in RECALLS else "a median rank, a number >= 1",
            )
        numbers[key] = float(value)
    if not any(key in numbers for key in RECALLS):
        raise ConfigError(where, row, f"a published row gives at least one of {', '.join(RECALLS)}")
    if all(key in numbers for key in RECALLS):
        numbers["rsum"] = round(sum(numbers[key] for key in RECALLS), 6)
    return Anchor(name, numbers=numbers, **words)


def load_anchors(name: str | None) -> AnchorSet | None:
    """The anchors ``configs/paper/anchors/<name>.yaml`` (None without a name); a row that lacks its
    source, features or model, or a number that is no recall, is a ConfigError naming the row."""
    if not name:
        return None
    data = read_yaml(config_dir() / "paper" / "anchors" / f"{name}.yaml", "table.anchors")
    rows = data.get("rows") or {}
    if not isinstance(rows, dict) or not rows:
        raise ConfigError(f"{name}.yaml: rows", rows, "a mapping of row names to published rows")
    return AnchorSet(
        **PublishedSource.fields(name, data),
        rows=tuple(_anchor(str(key), row, f"{name}.yaml: rows.{key}") for key, row in rows.items()),
    )


def reference_rows(spec: SweepSpec, shape: DataShape | None, test_protocol: str) -> tuple[list[Anchor], str]:
    """The sweep's anchors (``table.anchors``) when the trials' data and protocol are theirs, and a line
    that says what they are or why they are left out ("" when the sweep names none)."""
    anchors = load_anchors(spec.table.anchors if spec.table is not None else None)
    if anchors is None:
        return [], ""
    reason = anchors.comparable(shape, test_protocol)
    if reason:
        return [], f"Published anchors ({anchors.name}) left out, {reason}."
    return list(anchors.rows), (
        f"Published anchors ({anchors.name}, {anchors.description}): other methods on the same images, split, "
        f"captions and test protocol, with the image features each row names (not ours), as their papers print "
        f"them; rsum is the sum of the six printed recalls. They are no rows of this grid: no difference to the "
        f"baseline, never in the headline."
    )
