"""Rows that gave the same numbers to every digit: found, and treated as one row.

Two rows can differ in a setting that does not act (a term inert at these sizes): every seed then trains the same
weights, and ranked as two rows they would count one result twice. A row's fingerprint per seed is every test
metric, its validation curve and, where logged, its test ranks; two rows with the same seeds and equal
fingerprints are identical, listed as one row ``D = F`` (:func:`merged_label`).
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
