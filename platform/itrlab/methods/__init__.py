"""Training methods: encoders + losses + the step, looked up by name (``@register_method``).

One package per paper holds its methods, losses, model parts and data helpers; this import list is the only place that
names them. Importing a paper's package declares, without torch, its paper, methods, schemes and losses' settings, so
that a config's sections are typed before torch is imported (:mod:`itrlab.methods.sections`); a method's or loss's class
is imported when first looked up, the other exports when first used (:mod:`itrlab.lazy`).
"""

from itrlab.lazy import lazy_exports
from itrlab.methods.registry import (
    METHODS,
    PAPERS,
    SCHEMES,
    Paper,
    build_method,
    register_method,
    register_paper,
    register_scheme,
)

# the import list: each paper's package declares itself, its methods, losses and schemes
from itrlab.methods import vse, convse, dbl, xattn, coder, ascl, clip  # noqa: E402,F401  isort: skip

_EXPORTS = {
    **dict.fromkeys(["Method", "MethodModule", "MethodSettings"], "base"),
    "BuildContext": "context",
    "DualEncoderMethod": "dual",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = [
    "METHODS",
    "PAPERS",
    "SCHEMES",
    "BuildContext",
    "DualEncoderMethod",
    "Method",
    "MethodModule",
    "MethodSettings",
    "Paper",
    "build_method",
    "register_method",
    "register_paper",
    "register_scheme",
]
