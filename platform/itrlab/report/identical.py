"""Rows that gave the same numbers to every digit: found, and treated as one row.

Two rows of a grid can differ in a setting that does not act (a term that is inert where the data never
reach its threshold, an option the method ignores at these sizes): every seed then trains the same weights
and reports the same numbers. Ranked as two rows, they would count one result twice (in the comparisons, in
a multiple-comparison family, in a headline). A row's **fingerprint** per seed is what its trial measured:
every test metric, its validation curve and, where logged, its test ranks; two rows with the same seeds and
equal fingerprints for every seed are identical. The report lists them as one row, ``D = F``
(:func:`merged_label`), and says that they are identical to every digit.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

JOIN = " = "


def identical_groups(fingerprints: Mapping[str, Mapping[object, Hashable]]) -> list[tuple[str, ...]]:
    """Groups of two rows or more (row label -> seed -> fingerprint) whose seeds and fingerprints are all
    equal, each in the mapping's order, the groups in the order of their first row; a row without a seed
    belongs to none."""
    groups: dict[tuple, list[str]] = {}
    for row, seeds in fingerprints.items():
        if seeds:
            key = tuple(sorted(((repr(seed), value) for seed, value in seeds.items()), key=lambda item: item[0]))
            groups.setdefault(key, []).append(row)
    return [tuple(rows) for rows in groups.values() if len(rows) > 1]


def merged_label(group: tuple[str, ...]) -> str:
    """The one label of a group of identical rows: ``D = F``."""
    return JOIN.join(group)
