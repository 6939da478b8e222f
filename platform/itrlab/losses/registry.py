"""Look up losses by name (the keys used in configs).

Two registries: ``LOSSES`` holds the task losses of one branch (``forward(sims)``);
``COOPERATIVE_LOSSES`` holds the losses between a target and an anchor branch
(``forward(target, anchor)``: DBL's boosting losses and the distillation / mutual-learning
baselines). Loss modules register themselves with the ``register`` decorators.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping

from torch import nn


class LossRegistry(Mapping):
    """Loss classes by their ``name`` attribute, with parameter-checked construction."""

    def __init__(self, kind: str):
        self.kind = kind
        self._classes: dict[str, type] = {}

    def register(self, cls: type) -> type:
        if cls.name in self._classes:
            raise ValueError(f"{self.kind} {cls.name!r} is registered twice")
        self._classes[cls.name] = cls
        return cls

    def __getitem__(self, name: str) -> type:
        return self._classes[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._classes)

    def __len__(self) -> int:
        return len(self._classes)

    def get_class(self, name: str) -> type:
        if not isinstance(name, str) or name not in self._classes:
            raise ValueError(f"unknown {self.kind} {name!r}; known {self.kind}es: {', '.join(sorted(self._classes))}")
        return self._classes[name]

    def param_names(self, name: str) -> tuple[str, ...]:
        """Names of the constructor parameters of ``name`` (e.g. ``("margin", "tau")``)."""
        signature = inspect.signature(self.get_class(name).__init__)
        return tuple(p for p in signature.parameters if p != "self")

    def build(self, name: str, **params) -> nn.Module:
        """Build ``name`` with ``params`` (unset ones keep their defaults).

        Raises:
            ValueError: unknown name, a parameter the loss does not take, or a value out of range.
        """
        cls = self.get_class(name)
        allowed = self.param_names(name)
        unknown = sorted(set(params) - set(allowed))
        if unknown:
            raise ValueError(f"{self.kind} {name!r} takes no parameter(s) {', '.join(unknown)}; "
                             f"it takes: {', '.join(allowed) or 'none'}")
        return cls(**params)


LOSSES = LossRegistry("loss")
COOPERATIVE_LOSSES = LossRegistry("cooperative loss")
register_loss = LOSSES.register
register_cooperative_loss = COOPERATIVE_LOSSES.register


def loss_param_names(name: str) -> tuple[str, ...]:
    return LOSSES.param_names(name)


def build_loss(name: str, **params: float) -> nn.Module:
    return LOSSES.build(name, **params)


def cooperative_loss_param_names(name: str) -> tuple[str, ...]:
    return COOPERATIVE_LOSSES.param_names(name)


def build_cooperative_loss(name: str, **params) -> nn.Module:
    return COOPERATIVE_LOSSES.build(name, **params)
