"""The names a flag takes, from where they are defined, for every ``--help``, so that no help
names a choice by hand that the configs do not hold: presets and their profiles from ``configs/sweeps/``,
experiments from ``configs/experiments/``, a ``Literal`` setting's values from the schema.

:class:`ChoicesHelpFormatter` appends ``(choices: ...)`` to the help of an action marked with
:func:`list_choices`; the names are read when ``--help`` is shown, not when the parser is built.
"""

from __future__ import annotations

import argparse
import typing
from collections.abc import Callable

from itrlab.config.loader import config_dir, read_yaml

CHOICES_ATTR = "choices_of"


def experiment_names() -> list[str]:
    return sorted(path.stem for path in (config_dir() / "experiments").glob("*.yaml"))


def preset_names() -> list[str]:
    from itrlab.config.sweep import sweep_presets

    return sorted(sweep_presets())


def profile_names() -> list[str]:
    """Every profile some sweep file defines (each preset's own: ``--list``), the default first."""
    from itrlab.config.profiles import DEFAULT_PROFILE

    names = {
        name
        for path in (config_dir() / "sweeps").glob("*.yaml")
        for name in read_yaml(path, "sweep").get("profiles") or {}
    }
    return sorted(names, key=lambda name: (name != DEFAULT_PROFILE, name))


def literal_values(model: type, field: str) -> list[str]:
    """The values of a ``Literal`` field of a config section (``train.precision``: fp32, bf16, fp16)."""
    return [str(value) for value in typing.get_args(model.model_fields[field].annotation)]


def list_choices(action: argparse.Action, names: Callable[[], list[str]]) -> argparse.Action:
    """Mark ``action``: its ``--help`` ends with every name ``names()`` gives."""
    setattr(action, CHOICES_ATTR, names)
    return action


class ChoicesHelpFormatter(argparse.HelpFormatter):
    """``--help`` with the choices of every marked action (:func:`list_choices`) after its help."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = super()._get_help_string(action) or ""
        names = getattr(action, CHOICES_ATTR, None)
        if names is None:
            return text
        listed = ", ".join(names()).replace("%", "%%")  # help strings are %-formatted
        return f"{text} (choices: {listed})"
