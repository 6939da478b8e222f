"""Training methods: encoders + losses + the step, looked up by name (``@register_method``)."""

from itrlab.methods.base import Method, MethodModule, MethodSettings
from itrlab.methods.context import BuildContext
from itrlab.methods.cooperative import CooperativeMethod, ema_momentum
from itrlab.methods.registry import METHODS, build_method, cooperative_loss, register_method
from itrlab.methods.checks import check_method_config

# the method modules register their names on import
from itrlab.methods.dual import DualEncoderMethod
from itrlab.methods.interaction import InteractionMethod
from itrlab.methods.ascl import AsclMethod
from itrlab.methods.coder import CoderMethod

__all__ = ["METHODS", "AsclMethod", "BuildContext", "CoderMethod", "CooperativeMethod", "DualEncoderMethod", "InteractionMethod", "Method",
           "MethodModule", "MethodSettings", "build_method", "check_method_config", "cooperative_loss",
           "ema_momentum", "register_method"]
