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

Its registries are instances of the one registry class, :class:`itrlab.registry.Registry`, as are those of the
other named parts in their layers' ``registry.py``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, ValidationError

from itrlab.errors import SettingError
from itrlab.registry import Registry

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


class LossRegistry(Registry[type]):
    """Losses by name (:class:`~itrlab.registry.Registry`), each declared with its typed settings (no torch);
    registering a class checks its constructor against them and types every construction by them."""

    def __init__(self, kind: str):
        super().__init__(kind, plural=f"{kind}es")
        self._settings: dict[str, type[LossSettings]] = {}
        _REGISTRIES.append(self)

    def declare(self, name: str, settings: type[LossSettings], module: str) -> type[LossSettings]:  # type: ignore[override]
        """Declare loss ``name``: its typed ``settings`` and the ``module`` whose import registers its class."""
        super().declare(module, name)
        self._settings[name] = settings
        return settings

    def register(self, cls: type) -> type:  # type: ignore[override]
        """Add ``cls`` under ``cls.name`` (declared before); its constructor is typed by the declared settings."""
        name = cls.name
        if name not in self._settings:
            raise ValueError(
                f"{self.kind} {name!r} has no declared settings: declare them first "
                f"({type(self).__name__}.declare(name, settings, module))"
            )
        cls.__init__ = _typed_constructor(cls, self._settings[name])
        return self.add(name, cls)

    def _known(self, name: str) -> str:
        if not isinstance(name, str) or name not in self._settings:
            raise ValueError(f"unknown {self.kind} {name!r}; {self.unknown(name)}")
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
    return {cls for registry in _REGISTRIES for cls in registry._parts.values()}


LOSSES = LossRegistry("loss")
register_loss = LOSSES.register


def loss_param_names(name: str) -> tuple[str, ...]:
    return LOSSES.param_names(name)


def build_loss(name: str, **params: Any) -> nn.Module:
    return LOSSES.build(name, **params)
