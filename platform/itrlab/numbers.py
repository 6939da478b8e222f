"""One validator for the numeric settings of losses, methods and schemes.

:func:`check_number` accepts a real, finite number (not a bool, NaN or ±inf, nor beyond float32's range: the value ends
up in float32 tensors) inside optional bounds, as a float; otherwise a ``ValueError`` says what is allowed. Settings
declare it through their types: :func:`number` annotates a numeric setting
(``tau: number(gt=0, meaning="the temperature τ") = 0.1``), :data:`Flag` a true/false one, and pydantic names the
setting that failed.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import BeforeValidator, Strict

FLOAT32_MAX = 3.4028234663852886e38


def describe_bounds(
    gt: float | None = None, ge: float | None = None, lt: float | None = None, le: float | None = None
) -> str:
    """``a finite number > 0`` / ``a finite number in [0, 1]`` ...: the allowed range in words."""
    if ge is not None and le is not None:
        return f"a finite number in [{ge:g}, {le:g}]"
    if gt is not None and le is not None:
        return f"a finite number in ({gt:g}, {le:g}]"
    if ge is not None and lt is not None:
        return f"a finite number in [{ge:g}, {lt:g})"
    if gt is not None and lt is not None:
        return f"a finite number in ({gt:g}, {lt:g})"
    bounds = [
        f"> {gt:g}" if gt is not None else "",
        f">= {ge:g}" if ge is not None else "",
        f"< {lt:g}" if lt is not None else "",
        f"<= {le:g}" if le is not None else "",
    ]
    text = " and ".join(b for b in bounds if b)
    return f"a finite number {text}" if text else "a finite number"


def is_finite_number(value: object) -> bool:
    """A real int or float (not a bool) that is finite and fits float32."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value) and abs(value) <= FLOAT32_MAX


def check_number(
    name: str,
    value: object,
    *,
    gt: float | None = None,
    ge: float | None = None,
    lt: float | None = None,
    le: float | None = None,
    meaning: str | None = None,
) -> float:
    """``value`` as a float if it is a finite number within the bounds; ValueError naming ``name`` otherwise.

    ``meaning`` (e.g. "the temperature τ") is added to the message.
    """
    try:
        return _bounded(value, gt, ge, lt, le, meaning)
    except ValueError as err:
        raise ValueError(f"{name} {err}, got {value!r}") from None


def _bounded(
    value: object, gt: float | None, ge: float | None, lt: float | None, le: float | None, meaning: str | None
) -> float:
    if is_finite_number(value):
        number = float(value)  # type: ignore[arg-type]
        if not (
            (gt is not None and not number > gt)
            or (ge is not None and not number >= ge)
            or (lt is not None and not number < lt)
            or (le is not None and not number <= le)
        ):
            return number
    raise ValueError("must be " + describe_bounds(gt, ge, lt, le) + (f" ({meaning})" if meaning else ""))


def number(
    *,
    gt: float | None = None,
    ge: float | None = None,
    lt: float | None = None,
    le: float | None = None,
    meaning: str | None = None,
) -> Any:
    """The type of a numeric setting: a float checked as :func:`check_number` does, within the bounds.

    For pydantic models and ``validate_call`` signatures; the error says what is allowed, and pydantic's
    location names the setting."""
    return Annotated[float, BeforeValidator(lambda value: _bounded(value, gt, ge, lt, le, meaning))]


Flag = Annotated[bool, Strict()]
"""The type of a true/false setting: ``true`` or ``false`` only (not 1, not "yes")."""
