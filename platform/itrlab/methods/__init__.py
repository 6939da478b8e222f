"""Training methods: encoders + losses + the step, looked up by name."""

from itrlab.methods.base import Method, MethodModule
from itrlab.methods.dual import DualEncoderMethod
from itrlab.methods.registry import METHODS, build_method

__all__ = ["METHODS", "DualEncoderMethod", "Method", "MethodModule", "build_method"]
