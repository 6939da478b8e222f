"""Named parts by the names configs and command lines use: one registry class for every kind of part.

A :class:`Registry` holds one kind of part in its layer's registry: :mod:`itrlab.methods.registry` (methods, schemes,
papers), :mod:`itrlab.losses.registry` (losses), :mod:`itrlab.data.kinds.registry` (dataset kinds, stored features),
:mod:`itrlab.extract.readers.registry` (raw formats) and :mod:`itrlab.extract.steps`. A part is added by a decorator on
its class (``@register_kind("precomp")``) or :meth:`Registry.add`. A name may be *declared* first with the module that
registers it (:meth:`Registry.declare`): it is then known (listed, checked in a config) without that module, imported
when the part is first looked up, so that a paper's package declares its methods without torch and a bad config answers
in a second.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Mapping[str, T], Generic[T]):
    """Parts of one ``kind`` (``"dataset kind"``) by name: registered, or declared with the module that
    registers them. Iterating and ``in`` read names only; ``registry[name]`` imports a declared part's module."""

    def __init__(self, kind: str, plural: str | None = None):
        self.kind, self.plural = kind, plural or f"{kind}s"
        self._parts: dict[str, T] = {}
        self._modules: dict[str, str] = {}

    def declare(self, module: str, *names: str) -> None:
        """Make ``names`` known now; ``module`` registers their parts when imported."""
        for name in names:
            if name in self._modules:
                raise ValueError(f"{self.kind} {name!r} is declared twice")
            self._modules[name] = module

    def add(self, name: str, part: T) -> T:
        """Register ``part`` under ``name``: once, and from the module that declared it, if one did."""
        declared = self._modules.get(name)
        module = getattr(part, "__module__", declared)
        if name in self._parts or (declared is not None and declared != module):
            raise ValueError(f"{self.kind} {name!r} is registered twice ({declared or module} registers it)")
        self._parts[name] = part
        return part

    def register(self, *names: str, set_name: bool = True) -> Callable[[T], T]:
        """A class decorator registering the class under ``names``; with one name and ``set_name``, the class's
        ``name`` attribute becomes it."""

        def decorate(cls: T) -> T:
            if set_name and len(names) == 1:
                cls.name = names[0]  # type: ignore[attr-defined]
            for name in names:
                self.add(name, cls)
            return cls

        return decorate

    def __getitem__(self, name: str) -> T:
        if name not in self._parts and name in self._modules:
            importlib.import_module(self._modules[name])
        return self._parts[name]

    def __contains__(self, name: object) -> bool:
        return name in self._modules or name in self._parts

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*self._modules, *self._parts]))

    def __len__(self) -> int:
        return len(dict.fromkeys([*self._modules, *self._parts]))

    def unknown(self, name: object) -> str:
        """What is allowed instead of ``name``, with the closest known name: the text of a bad input's error."""
        known = sorted(self)
        close = difflib.get_close_matches(str(name), known, n=1, cutoff=0.5)
        return f"known {self.plural}: {', '.join(known)}" + (f" (did you mean '{close[0]}'?)" if close else "")

    def lookup(self, name: str, error: Callable[[str], Exception] = ValueError) -> T:
        """The part ``name``, or ``error`` raised with :meth:`unknown`'s text (after ``got 'name'; ``)."""
        if name not in self:
            raise error(f"got {name!r}; {self.unknown(name)}")
        return self[name]
