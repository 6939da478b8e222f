"""A package's exports, imported when first used (PEP 562's module ``__getattr__``).

Importing any module of a package runs the package's ``__init__``; one that imports every submodule makes a command that
needs only a name list or a parser pay for torch, Ray or MLflow before its first line (an unknown preset, ``--help``). A
package whose ``__init__`` declares its exports with :func:`lazy_exports` imports a submodule when one of its names is
asked for; ``from itrlab.eval import evaluate`` works as an eager import would.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose ``exports`` map each public name to the
    module that defines it: a submodule's name (``"recall"``), or a full name (``"itrlab.config.sweep"``)."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module if "." in module else f"{package}.{module}"), name)

    def __dir__() -> list[str]:
        return sorted(exports)

    return __getattr__, __dir__
