"""xattn: DBL's single-branch interaction baseline (cross-attention scorer, DBL eq. 1-2).

Importing the package declares the method without torch; it is imported when first used (:mod:`itrlab.lazy`)."""

from itrlab.lazy import lazy_exports
from itrlab.methods.registry import METHODS

METHODS.declare("itrlab.methods.xattn.method", "xattn")

_EXPORTS = dict.fromkeys(["InteractionMethod", "XattnSettings"], "method")
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)
