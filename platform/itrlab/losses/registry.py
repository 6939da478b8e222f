"""Look up losses by name (the keys used in configs), and the one way their settings are typed.

A :class:`LossRegistry` holds losses by their ``name``. ``LOSSES`` holds the task losses of one
branch (``forward(sims)``); a paper's package may keep a registry of its own for losses of another
kind (DBL's losses between two branches) and registers its classes there.

**Settings.** A loss's settings are declared once, without torch: a :class:`LossSettings` model (its
fields typed with what each accepts, ``tau: number(gt=0) = 0.1``, ``soft: Flag = False``,
``hardest: Literal[...]``, with the paper's defaults, and a validator for a check that a type cannot
say, such as one setting contradicting another: :class:`~itrlab.errors.SettingError`), declared with
the module that defines the loss (:meth:`LossRegistry.declare`). The config sections are typed by
these models before torch is imported (``itrlab.methods.sections``); the class is imported when a
loss is first built. Registering the class (:meth:`LossRegistry.register`) checks that its
constructor takes exactly the declared settings, and wraps it so that every construction, from a
config or from code, is typed by the model: a setting the loss does not take or a value it does not
accept is a ``ValidationError`` whose location names the setting, a contradiction a ``SettingError``.
A constructor also takes the typed settings themselves (``cls(settings)``), as built from a config.

The same concept as the other registries of named parts, each in its layer's ``registry.py``: losses
(:mod:`itrlab.losses.registry`), methods and schemes (:mod:`itrlab.methods.registry`), dataset kinds
(:mod:`itrlab.data.kinds.registry`) and raw formats (:mod:`itrlab.extract.readers.registry`).
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, ValidationError

from itrlab.errors import SettingError

if TYPE_CHECKING:
    from torch import nn


class LossSettings(BaseModel):
    """Base of a loss's declared settings: strict types (a bool is no number, a string no list), finite
    numbers, no key the loss does not take; frozen (typed once, read as they are)."""

    model_config = ConfigDict(
        extra="forbid", strict=True, allow_inf_nan=False, frozen=True, arbitrary_types_allowed=True
    )

    def collapse_value(self, batch_size: int) -> float | None:
        """The loss's value on a batch of ``batch_size`` pairs when every similarity is equal (the embeddings
        collapsed): the plateau a loss that stopped learning sits on, whichever side it came from (None:
        unknown, or it depends on the data)."""
        return None


def typed_settings(model: type[LossSettings], params: Mapping[str, Any]) -> LossSettings:
    """``params`` typed by ``model``; a contradiction its validator found is raised as the SettingError it
    is (pydantic carries it inside a ValidationError), every other refusal as pydantic's ValidationError."""
    try:
        return model.model_validate(dict(params))
    except ValidationError as err:
        carried = err.errors()[0].get("ctx", {}).get("error")
        if isinstance(carried, SettingError):
            raise carried from None
        raise


_REGISTRIES: list[LossRegistry] = []


class LossRegistry(Mapping):
    """Losses by name: their declared settings (no torch) and, once their module is imported, their classes.

    Iterating, ``in`` and :meth:`settings` read the declarations only; ``registry[name]``,
    :meth:`get_class` and :meth:`build` import the loss's module when its class is not registered yet.
    """

    def __init__(self, kind: str):
        self.kind = kind
        self._settings: dict[str, type[LossSettings]] = {}
        self._modules: dict[str, str] = {}
        self._classes: dict[str, type] = {}
        _REGISTRIES.append(self)

    def declare(self, name: str, settings: type[LossSettings], module: str) -> type[LossSettings]:
        """Declare loss ``name``: its typed ``settings`` and the ``module`` whose import registers its class."""
        if name in self._settings:
            raise ValueError(f"{self.kind} {name!r} is declared twice")
        self._settings[name], self._modules[name] = settings, module
        return settings

    def register(self, cls: type) -> type:
        """Add ``cls`` under ``cls.name`` (declared before); its constructor is typed by the declared settings."""
        name = cls.name
        if name not in self._settings:
            raise ValueError(
                f"{self.kind} {name!r} has no declared settings: declare them first "
                f"({type(self).__name__}.declare(name, settings, module))"
            )
        if name in self._classes:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        cls.__init__ = _typed_constructor(cls, self._settings[name])
        self._classes[name] = cls
        return cls

    def __getitem__(self, name: str) -> type:
        if name not in self._classes and name in self._modules:
            importlib.import_module(self._modules[name])
        return self._classes[name]

    def __contains__(self, name: object) -> bool:
        return name in self._settings

    def __iter__(self) -> Iterator[str]:
        return iter(self._settings)

    def __len__(self) -> int:
        return len(self._settings)

    def _known(self, name: str) -> str:
        if not isinstance(name, str) or name not in self._settings:
            raise ValueError(f"unknown {self.kind} {name!r}; known {self.kind}es: {', '.join(sorted(self._settings))}")
        return name

    def get_class(self, name: str) -> type:
        return self[self._known(name)]

    def settings(self, name: str) -> type[LossSettings]:
        """The declared settings of ``name`` (no torch)."""
        return self._settings[self._known(name)]

    def param_names(self, name: str) -> tuple[str, ...]:
        """The settings of ``name`` (e.g. ``("margin", "tau")``), in the constructor's order."""
        return tuple(self.settings(name).model_fields)

    def typed(self, name: str, params: Mapping[str, Any]) -> LossSettings:
        """``params`` typed by ``name``'s settings, defaults filled in (no torch).

        Raises:
            ValueError: an unknown name; pydantic's ValidationError (a ValueError) for a setting the
                loss does not take or a value it does not accept; SettingError for a contradiction.
        """
        return typed_settings(self.settings(name), params)

    def build(self, name: str, settings: LossSettings | None = None, **params) -> nn.Module:
        """Build ``name`` from its typed ``settings``, or from ``params`` (unset ones keep their defaults);
        raises as :meth:`typed` does."""
        cls = self.get_class(name)
        return cls(settings) if settings is not None else cls(**params)


def _typed_constructor(cls: type, settings: type[LossSettings]):
    """``cls``'s own constructor, whose parameters are ``settings``' fields in order, behind one that types
    its arguments by ``settings`` (or takes a ``settings`` instance as it is) and passes every field."""
    init = getattr(cls.__init__, "__itrlab_constructor__", cls.__init__)
    fields = tuple(settings.model_fields)
    takes = tuple(p for p in inspect.signature(init).parameters if p != "self")
    if takes != fields:
        raise TypeError(
            f"{cls.__name__}'s constructor takes ({', '.join(takes)}); its declared settings are "
            f"({', '.join(fields)}): the same names, in the same order"
        )

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and isinstance(args[0], settings):
            typed = args[0]
        else:
            if len(args) > len(fields):
                raise TypeError(f"{cls.__name__} takes at most {len(fields)} settings, got {len(args)}")
            given = dict(zip(fields, args))
            twice = sorted(set(given) & set(kwargs))
            if twice:
                raise TypeError(f"{cls.__name__} got {', '.join(twice)} twice")
            typed = typed_settings(settings, {**given, **kwargs})
        init(self, **dict(typed))

    __init__.__itrlab_constructor__ = init
    __init__.__signature__ = inspect.Signature(
        [
            inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
            *(
                inspect.Parameter(
                    name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=field.default, annotation=field.annotation
                )
                for name, field in settings.model_fields.items()
            ),
        ]
    )
    return __init__


def loss_registries() -> tuple[LossRegistry, ...]:
    """Every loss registry: the task losses' and each package's own kind."""
    return tuple(_REGISTRIES)


def registered_loss_classes() -> set[type]:
    """Every class registered so far in every loss registry (the task losses and any package's own kind)."""
    return {cls for registry in _REGISTRIES for cls in registry._classes.values()}


LOSSES = LossRegistry("loss")
register_loss = LOSSES.register


def loss_param_names(name: str) -> tuple[str, ...]:
    return LOSSES.param_names(name)


def build_loss(name: str, **params: Any) -> nn.Module:
    return LOSSES.build(name, **params)
