"""Methods by name (the values of a config's ``method.name``), and how a config builds one.

Nothing here imports torch: a paper's package declares its methods' names with the module that defines them
(:meth:`~itrlab.registry.Registry.declare`), its schemes and its losses' settings; the classes are imported when first
looked up. Method classes register with ``@register_method("name", ...)``, one class possibly under several names. A
*scheme* wraps a method in branches when a config section of its own is set; its package registers it with
:func:`register_scheme` and the section's typed settings, so that the platform names no scheme, section or setting of a
paper. :func:`build_method` builds a config's method, wrapped in its scheme. The registries are instances of
:class:`itrlab.registry.Registry`, as are those of the other named parts in their layers' ``registry.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from itrlab.config import ExperimentConfig
from itrlab.config.schema import Section
from itrlab.registry import Registry

if TYPE_CHECKING:
    from itrlab.methods.base import MethodModule
    from itrlab.methods.context import BuildContext


METHODS: Registry[type[MethodModule]] = Registry("method")


def register_method(*names: str) -> Callable[[type[MethodModule]], type[MethodModule]]:
    """A class decorator: the method class serves the config names ``names`` (declared by its package)."""
    return METHODS.register(*names, set_name=False)


def method_settings_models() -> tuple[type, ...]:
    """The distinct settings classes of the methods (the ``method`` section's union; imports every method)."""
    return tuple(dict.fromkeys(METHODS[name].settings for name in METHODS))


@dataclass(frozen=True)
class Scheme:
    """A wrapper of any method, used when its config ``section`` is set.

    ``settings`` types the section without torch, once, refusing what it cannot run on ``<section>.<key>`` and filling
    in the defaults (so that runs log them); ``build(config, make_branch, context)`` returns the wrapped method, calling
    ``make_branch()`` for each fresh branch; ``describe(settings)`` is the section on one line, for tags and notes;
    ``fresh(settings)`` the same scheme with every branch fresh, none read from a checkpoint or trained first (to count
    a step's cost without data); ``structure(settings)`` what decides a step's cost, in words (None: a plain branch).
    """

    section: str
    settings: type[Section]
    build: Callable[[ExperimentConfig, Callable[[], MethodModule], BuildContext], MethodModule]
    describe: Callable[[Section], str]
    fresh: Callable[[Section], Section]
    structure: Callable[[Section], str | None]


SCHEMES: Registry[Scheme] = Registry("scheme")


@dataclass(frozen=True)
class Paper:
    """A paper whose methods itrlab reproduces: ``name`` as its presets' titles begin (``CODER Table 2:
    ...``), ``citation`` for listings, ``page`` its page of the manual."""

    name: str
    citation: str
    page: str


PAPERS: Registry[Paper] = Registry("paper")


def register_paper(paper: Paper) -> Paper:
    """Declare a paper (its package's ``__init__`` does): the catalogue of presets reads them from here."""
    return PAPERS.add(paper.name, paper)


def register_scheme(scheme: Scheme) -> Scheme:
    """Register ``scheme`` for its config section (one scheme a section)."""
    return SCHEMES.add(scheme.section, scheme)


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
    """The method of ``config``, prepared from ``context``, wrapped in its scheme if any; without a context (unit
    tests), ``vocab_size`` and ``feature_dim`` make a bare one. Every branch built fresh is prepared."""
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
