"""Training methods: encoders + losses + the step, looked up by name (``@register_method``).

One package per paper holds its methods, losses, model parts and data helpers, and registers
them on import; this list is the only place that names them.
"""

from itrlab.methods.base import Method, MethodModule, MethodSettings
from itrlab.methods.context import BuildContext
from itrlab.methods.dual import DualEncoderMethod
from itrlab.methods.registry import (METHODS, PAPERS, SCHEMES, Paper, build_method, register_method, register_paper,
                                     register_scheme)

# the import list: each paper's package registers itself, its methods, losses and schemes
from itrlab.methods import vse, convse, dbl, xattn, coder, ascl, clip  # noqa: E402,F401  isort: skip

__all__ = ["METHODS", "PAPERS", "SCHEMES", "BuildContext", "DualEncoderMethod", "Method", "MethodModule",
           "MethodSettings", "Paper", "build_method", "register_method", "register_paper", "register_scheme"]
