"""Methods by name (the names a config's ``method.name`` may take), and how a config builds one.

Method classes register themselves with ``@register_method("name", ...)``; one class may serve
several names (the dual encoders differ only in their config). :func:`check_method_config` is the
config-time check of everything the method layer knows (method, loss and cooperative names and
parameters); :func:`build_method` builds a validated config's method, wrapped in its cooperative
scheme when it has one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from itrlab.config import ExperimentConfig
from itrlab.config.schema import CooperativeConfig
from itrlab.losses import CooperativeLoss, build_cooperative_loss
from itrlab.losses.boosting import build_dbl_strategy
from itrlab.methods.base import MethodModule
from itrlab.methods.context import BuildContext
from itrlab.methods.cooperative import CooperativeMethod


class MethodRegistry(Mapping):
    """Method classes by config name."""

    def __init__(self) -> None:
        self._classes: dict[str, type[MethodModule]] = {}

    def register(self, *names: str) -> Callable[[type[MethodModule]], type[MethodModule]]:
        def decorate(cls: type[MethodModule]) -> type[MethodModule]:
            for name in names:
                if name in self._classes:
                    raise ValueError(f"method {name!r} is registered twice")
                self._classes[name] = cls
            return cls
        return decorate

    def __getitem__(self, name: str) -> type[MethodModule]:
        return self._classes[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._classes)

    def __len__(self) -> int:
        return len(self._classes)


METHODS = MethodRegistry()
register_method = METHODS.register


def cooperative_loss(cooperative: CooperativeConfig | None) -> CooperativeLoss | None:
    """The cooperative loss a config section asks for, or None (no section, or DBL's row A).

    A DBL ``strategy`` letter (Table IV) fixes the loss and its flags; ``gamma`` and ``alpha``
    written beside it set the margins. Otherwise ``loss`` names any cooperative loss.
    """
    if cooperative is None:
        return None
    if cooperative.strategy is not None:
        return build_dbl_strategy(cooperative.strategy, **cooperative.params())
    return build_cooperative_loss(cooperative.loss, **cooperative.params())


def build_method(config: ExperimentConfig, context: BuildContext | None = None, *,
                 vocab_size: int | None = None, feature_dim: int | None = None) -> MethodModule:
    """The method of ``config``, prepared from ``context``, wrapped in its cooperative scheme if any.

    Without a context (unit tests), ``vocab_size`` and ``feature_dim`` make a bare one. Every
    branch built fresh is prepared (GloVe ...); an OAS anchor loaded from a checkpoint keeps the
    weights it was trained to.
    """
    if context is None:
        if vocab_size is None or feature_dim is None:
            raise TypeError("build_method needs a BuildContext, or vocab_size and feature_dim")
        context = BuildContext(feature_dim=feature_dim, vocab_size=vocab_size)
    cls = METHODS[config.method.name]

    def make_branch() -> MethodModule:
        branch = cls.from_config(config, context)
        branch.prepare(context)
        return branch

    loss = cooperative_loss(config.cooperative)
    if loss is None:
        return make_branch()
    cooperative = config.cooperative
    checkpoint = cooperative.anchor_checkpoint
    if cooperative.scenario == "oas" and checkpoint is None:
        if context.train_anchor is None:
            raise ValueError("the oas scenario needs cooperative.anchor_checkpoint, or a trainer to train the anchor")
        checkpoint = Path(context.train_anchor(config.model_copy(update={"cooperative": None})))
    return CooperativeMethod.build(
        make_branch, loss, cooperative.scenario,
        branches=cooperative.branches, weight=cooperative.weight,
        ema=(cooperative.ema.start, cooperative.ema.end), anchor_checkpoint=checkpoint,
    )
