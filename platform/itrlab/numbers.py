"""One validator for the numeric settings of losses, methods and configs.

:func:`check_number` accepts a real, finite number (not a bool, not NaN or ±inf, not beyond
float32's range, since the value ends up in float32 tensors) inside optional bounds and returns it
as a float; otherwise it raises ``ValueError`` whose message says what is allowed. Losses call it
in their constructors, and config checks build the losses, so a bad value is one clear message
before anything starts.
"""

from __future__ import annotations

import math

FLOAT32_MAX = 3.4028234663852886e38


def describe_bounds(gt: float | None = None, ge: float | None = None, lt: float | None = None,
                    le: float | None = None) -> str:
    """``a finite number > 0`` / ``a finite number in [0, 1]`` ...: the allowed range in words."""
    if ge is not None and le is not None:
        return f"a finite number in [{ge:g}, {le:g}]"
    if gt is not None and le is not None:
        return f"a finite number in ({gt:g}, {le:g}]"
    if ge is not None and lt is not None:
        return f"a finite number in [{ge:g}, {lt:g})"
    if gt is not None and lt is not None:
        return f"a finite number in ({gt:g}, {lt:g})"
    bounds = [f"> {gt:g}" if gt is not None else "", f">= {ge:g}" if ge is not None else "",
              f"< {lt:g}" if lt is not None else "", f"<= {le:g}" if le is not None else ""]
    text = " and ".join(b for b in bounds if b)
    return f"a finite number {text}" if text else "a finite number"


def is_finite_number(value: object) -> bool:
    """A real int or float (not a bool) that is finite and fits float32."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value) and abs(value) <= FLOAT32_MAX


def check_number(name: str, value: object, *, gt: float | None = None, ge: float | None = None,
                 lt: float | None = None, le: float | None = None, meaning: str | None = None) -> float:
    """``value`` as a float if it is a finite number within the bounds; ValueError naming ``name`` otherwise.

    ``meaning`` (e.g. "the temperature τ") is added to the message.
    """
    allowed = describe_bounds(gt, ge, lt, le) + (f" ({meaning})" if meaning else "")
    if not is_finite_number(value):
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
    number = float(value)  # type: ignore[arg-type]
    if ((gt is not None and not number > gt) or (ge is not None and not number >= ge)
            or (lt is not None and not number < lt) or (le is not None and not number <= le)):
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
    return number
