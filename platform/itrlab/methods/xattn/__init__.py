"""xattn: DBL's single-branch interaction baseline (cross-attention scorer, DBL eq. 1-2)."""

from itrlab.methods.xattn.method import InteractionMethod, XattnSettings

__all__ = ["InteractionMethod", "XattnSettings"]
