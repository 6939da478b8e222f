"""Look up losses by name (the keys used in configs), and the one way their settings are checked.

A :class:`LossRegistry` holds loss classes by their ``name``. ``LOSSES`` holds the task losses of one
branch (``forward(sims)``); a paper's package may keep a registry of its own for losses of another
kind (DBL's losses between two branches) and registers its classes there.

**Settings.** A loss's settings are its constructor's parameters, typed with what each accepts
(``tau: number(gt=0) = 0.1``, ``soft: Flag = False``, ``hardest: Literal[...]``). Registering a class
wraps its constructor in pydantic's ``validate_call``, so every construction (from a config or from
code) checks every setting, refuses a setting the loss does not take, and names the failing setting
in the error's location. A check that a type cannot express (one setting contradicting another) raises
:class:`~itrlab.errors.SettingError`, which names its setting too.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping

from pydantic import ConfigDict, validate_call
from torch import nn

SETTINGS_CALL = ConfigDict(strict=True, allow_inf_nan=False, arbitrary_types_allowed=True)
"""How loss settings are validated: strict types (a bool is no number, a string no list), finite numbers."""

_REGISTRIES: list["LossRegistry"] = []


class LossRegistry(Mapping):
    """Loss classes by their ``name`` attribute, with settings-checked construction."""

    def __init__(self, kind: str):
        self.kind = kind
        self._classes: dict[str, type] = {}
        _REGISTRIES.append(self)

    def register(self, cls: type) -> type:
        """Add ``cls`` under ``cls.name``; its constructor validates its settings from now on."""
        if cls.name in self._classes:
            raise ValueError(f"{self.kind} {cls.name!r} is registered twice")
        if "__init__" in vars(cls) or not getattr(cls.__init__, "__itrlab_validated__", False):
            validated = validate_call(cls.__init__, config=SETTINGS_CALL)
            validated.__itrlab_validated__ = True
            cls.__init__ = validated
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
        """The settings of ``name``: its constructor's parameters (e.g. ``("margin", "tau")``)."""
        signature = inspect.signature(self.get_class(name).__init__)
        return tuple(p for p in signature.parameters if p != "self")

    def build(self, name: str, **params) -> nn.Module:
        """Build ``name`` with ``params`` (unset ones keep their defaults).

        Raises:
            ValueError: an unknown name; pydantic's ValidationError (a ValueError) for a setting the
                loss does not take or a value it does not accept; SettingError for a contradiction.
        """
        return self.get_class(name)(**params)


def registered_loss_classes() -> set[type]:
    """Every class of every loss registry (the task losses and any package's own kind)."""
    return {cls for registry in _REGISTRIES for cls in registry.values()}


LOSSES = LossRegistry("loss")
register_loss = LOSSES.register


def loss_param_names(name: str) -> tuple[str, ...]:
    return LOSSES.param_names(name)


def build_loss(name: str, **params: float) -> nn.Module:
    return LOSSES.build(name, **params)
