"""VSE and VSE++: the plain dual encoders every ITR paper compares against."""

from itrlab.methods.vse.method import VseMethod, VseSettings

__all__ = ["VseMethod", "VseSettings"]
