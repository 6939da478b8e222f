"""The config sections typed by what the packages declare, without torch: the ``loss`` section by its loss's declared
settings, each scheme's section by its registered settings.

:func:`declared_schema` is the experiment schema with those sections typed, with which the sweeps' pre-check
(``--dry-run``, ``--list``, every sweep) and :mod:`itrlab.assembly` (which adds the ``method`` section) check configs,
so that a bad setting of a loss or a scheme is one line before torch is imported. Each section is typed once
(:mod:`itrlab.methods.loss_section`); a run builds its losses from the typed settings kept with it.
"""

from __future__ import annotations

from pydantic import create_model

from itrlab.config.schema import ExperimentConfig
from itrlab.methods.loss_section import TypedLoss
from itrlab.methods.registry import SCHEMES


def _declared_schema() -> type[ExperimentConfig]:
    sections = {scheme.section: (scheme.settings | None, None) for scheme in SCHEMES.values()}
    schema = create_model(
        "DeclaredConfig", __base__=ExperimentConfig, __module__=__name__, loss=(TypedLoss, ...), **sections
    )
    schema.__qualname__ = "DeclaredConfig"
    return schema


DeclaredConfig = _declared_schema()  # module-level, so that configs pickle by reference
_schemes = tuple(SCHEMES)


def declared_schema() -> type[ExperimentConfig]:
    """:class:`ExperimentConfig` with the ``loss`` section typed by its loss's settings and a section for
    each registered scheme, typed by its settings (absent: None); the ``method`` section keeps its keys as
    given (its methods' settings are typed by the assembly). Rebuilt when a scheme was registered since."""
    global DeclaredConfig, _schemes
    if tuple(SCHEMES) != _schemes:
        DeclaredConfig, _schemes = _declared_schema(), tuple(SCHEMES)
    return DeclaredConfig
