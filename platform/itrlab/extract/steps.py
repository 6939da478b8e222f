"""Features stored beside an extraction, by name: what a run reads instead of computing it at every step.

An extraction writes the precomp layout (:mod:`itrlab.extract.job`); a *step* computes more from it once and
stores it beside it: the captions' text-model states (``--text``: :mod:`itrlab.extract.text`, read back by
:mod:`itrlab.data.text_features`) are the first. Each step registers itself with ``@register_step("name")``
in its own module and owns its flags; ``jobs/extract_features.py`` runs every step asked for after the images
(or alone, when a step's flags say so) and names none (``docs/adding-a-dataset.md``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from itrlab.registry import Registry

STEPS: Registry[type[Step]] = Registry("extraction step")


class Step:
    """A step after the images, with its own command-line flags.

    ``options(args, out)`` checks what the flags ask for, before any work (a UserInputError of one line), and
    returns the step's options, or None when it is not asked for (``out()`` is the precomp folder ``--out``, or
    its default); ``only(args)``: the step runs alone, on an existing precomp folder (no image is extracted);
    ``run(options, log)`` does it and returns its report's lines; ``work_dir(options)`` keeps its finished
    chunks (Ctrl-C's message); ``written(options)`` what it wrote, for the last line.
    """

    name: ClassVar[str] = ""

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        raise NotImplementedError

    @classmethod
    def only(cls, args: argparse.Namespace) -> bool:
        return False

    @classmethod
    def options(cls, args: argparse.Namespace, out: Callable[[], Path]) -> Any | None:
        raise NotImplementedError

    @classmethod
    def run(cls, options: Any, log: Callable[[str], None]) -> list[str]:
        raise NotImplementedError

    @classmethod
    def work_dir(cls, options: Any) -> Path:
        raise NotImplementedError

    @classmethod
    def written(cls, options: Any) -> str:
        raise NotImplementedError


register_step = STEPS.register


__all__ = ["STEPS", "Step", "register_step"]
