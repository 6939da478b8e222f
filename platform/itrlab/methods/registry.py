"""Methods by name (the names a config's ``method.name`` may take), and how a config builds one.

Nothing here imports torch: a paper's package declares, without torch, the names of its methods and
the module that defines them (:meth:`MethodRegistry.declare`), its schemes and its losses' settings;
the classes are imported when first looked up. Method classes register themselves with
``@register_method("name", ...)``; one class may serve several names (the dual encoders differ only
in their config). A *scheme* wraps a method in branches when a config section of its own is set: its
package registers it with :func:`register_scheme`, with the typed settings of that section, so that
the platform names no scheme, section or setting of a paper. :func:`build_method` builds an assembled
config's method, wrapped in its scheme when the config has one.

The same concept as the other registries of named parts, each in its layer's ``registry.py``: losses
(:mod:`itrlab.losses.registry`), methods and schemes (:mod:`itrlab.methods.registry`), dataset kinds
(:mod:`itrlab.data.kinds.registry`) and raw formats (:mod:`itrlab.extract.readers.registry`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from itrlab.config import ExperimentConfig
from itrlab.config.schema import Section

if TYPE_CHECKING:
    from itrlab.methods.base import MethodModule
    from itrlab.methods.context import BuildContext


class MethodRegistry(Mapping):
    """Method classes by config name: declared names (no torch), their classes imported when first looked up."""

    def __init__(self) -> None:
        self._classes: dict[str, type[MethodModule]] = {}
        self._modules: dict[str, str] = {}

    def declare(self, module: str, *names: str) -> None:
        """Declare methods ``names``, whose classes ``module`` registers when it is imported."""
        for name in names:
            if name in self._modules:
                raise ValueError(f"method {name!r} is declared twice")
            self._modules[name] = module

    def register(self, *names: str) -> Callable[[type[MethodModule]], type[MethodModule]]:
        def decorate(cls: type[MethodModule]) -> type[MethodModule]:
            for name in names:
                declared = self._modules.get(name, cls.__module__)
                if name in self._classes or declared != cls.__module__:
                    raise ValueError(f"method {name!r} is registered twice ({declared} registers it)")
                self._classes[name] = cls
            return cls

        return decorate

    def __getitem__(self, name: str) -> type[MethodModule]:
        if name not in self._classes and name in self._modules:
            importlib.import_module(self._modules[name])
        return self._classes[name]

    def __contains__(self, name: object) -> bool:
        return name in self._modules or name in self._classes

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*self._modules, *self._classes]))

    def __len__(self) -> int:
        return len(dict.fromkeys([*self._modules, *self._classes]))

    def settings_models(self) -> tuple[type, ...]:
        """The distinct settings classes of the methods (the ``method`` section's union; imports every method)."""
        return tuple(dict.fromkeys(self[name].settings for name in self))


METHODS = MethodRegistry()
register_method = METHODS.register


@dataclass(frozen=True)
class Scheme:
    """A wrapper of any method, used when its config ``section`` is set (not None).

    ``settings`` types the section (the config schema gets ``<section>: settings | None``): without
    torch, once, with what it cannot run refused on ``<section>.<key>`` and the settings left to their
    defaults filled in (so that runs log them);
    ``build(config, make_branch, context)`` returns the wrapped method, calling ``make_branch()`` for
    each fresh branch; ``describe(settings)`` is the section on one line, for tags and run notes;
    ``fresh(settings)`` the same scheme with every branch built fresh, none read from a checkpoint or
    trained first (to count a step's cost or a model's shape without its data); ``structure(settings)``
    what decides the cost of a step, in words (None: the section wraps nothing, a plain branch trains).
    """

    section: str
    settings: type[Section]
    build: Callable[[ExperimentConfig, Callable[[], MethodModule], BuildContext], MethodModule]
    describe: Callable[[Section], str]
    fresh: Callable[[Section], Section]
    structure: Callable[[Section], str | None]


SCHEMES: dict[str, Scheme] = {}


@dataclass(frozen=True)
class Paper:
    """A paper whose methods itrlab reproduces: ``name`` as its presets' titles begin (``CODER Table 2:
    ...``), ``citation`` for listings, ``page`` its page of the manual."""

    name: str
    citation: str
    page: str


PAPERS: dict[str, Paper] = {}


def register_paper(paper: Paper) -> Paper:
    """Declare a paper (its package's ``__init__`` does): the catalogue of presets reads them from here."""
    if paper.name in PAPERS:
        raise ValueError(f"paper {paper.name!r} is registered twice")
    PAPERS[paper.name] = paper
    return paper


def register_scheme(scheme: Scheme) -> Scheme:
    if scheme.section in SCHEMES:
        raise ValueError(f"a scheme for config section {scheme.section!r} is registered twice")
    SCHEMES[scheme.section] = scheme
    return scheme


def scheme_of(config: ExperimentConfig) -> Scheme | None:
    """The scheme whose config section ``config`` sets, if any."""
    return next((s for s in SCHEMES.values() if getattr(config, s.section, None) is not None), None)


def with_fresh_branches(config: ExperimentConfig) -> ExperimentConfig:
    """``config`` with its scheme's branches all built fresh (:attr:`Scheme.fresh`): nothing is read from a
    checkpoint or trained first, so its shape and the cost of its step can be known without data."""
    scheme = scheme_of(config)
    if scheme is None:
        return config
    return config.model_copy(update={scheme.section: scheme.fresh(getattr(config, scheme.section))})


def scheme_structure(config: ExperimentConfig) -> str | None:
    """What decides the cost of ``config``'s step beyond its method and model: its scheme's structure
    (None without a scheme, or where the scheme wraps nothing)."""
    scheme = scheme_of(config)
    return None if scheme is None else scheme.structure(getattr(config, scheme.section))


def scheme_labels(config: ExperimentConfig) -> dict[str, str]:
    """Each registered scheme's section on one line (``none`` where ``config`` does not set it): tags that
    keep a plain run apart from the same method inside a scheme."""
    labels = {}
    for scheme in SCHEMES.values():
        section = getattr(config, scheme.section, None)
        labels[scheme.section] = "none" if section is None else scheme.describe(section)
    return labels


def build_method(
    config: ExperimentConfig,
    context: BuildContext | None = None,
    *,
    vocab_size: int | None = None,
    feature_dim: int | None = None,
) -> MethodModule:
    """The method of ``config``, prepared from ``context``, wrapped in its scheme if any.

    Without a context (unit tests), ``vocab_size`` and ``feature_dim`` make a bare one. Every
    branch built fresh is prepared (GloVe ...).
    """
    from itrlab.methods.context import BuildContext  # the data layer

    if context is None:
        if vocab_size is None or feature_dim is None:
            raise TypeError("build_method needs a BuildContext, or vocab_size and feature_dim")
        context = BuildContext(feature_dim=feature_dim, vocab_size=vocab_size)
    cls = METHODS[config.method.name]

    def make_branch() -> MethodModule:
        branch = cls.from_config(config, context)
        branch.prepare(context)
        return branch

    scheme = scheme_of(config)
    return make_branch() if scheme is None else scheme.build(config, make_branch, context)
