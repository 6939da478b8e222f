"""Training methods: encoders + losses + the step, looked up by name."""

from itrlab.methods.base import Method, MethodModule
from itrlab.methods.dual import DualEncoderMethod
from itrlab.methods.cooperative import CooperativeMethod, ema_momentum
from itrlab.methods.registry import METHODS, build_method, cooperative_loss

__all__ = ["METHODS", "CooperativeMethod", "cooperative_loss", "ema_momentum", "DualEncoderMethod", "Method", "MethodModule", "build_method"]
