"""Config-time checks of everything the method layer knows, run on every validated config.

Names are checked against the registries (methods, losses, cooperative losses, protocols), and
losses are *built*, so every parameter is checked by the same code that will use it: a value a
trial would reject fails here, as one ConfigError, before Ray, MLflow or training start. Each
method then checks its own section and the settings it cannot use (``validate_config``).
"""

from __future__ import annotations

from typing import Any

from itrlab.config.checks import DATA_CHECKS
from itrlab.config.loader import did_you_mean
from itrlab.config.schema import ExperimentConfig
from itrlab.errors import ConfigError


def _bad_value(section: str, params: dict[str, Any], err: ValueError, fallback: str, value: object) -> ConfigError:
    """A constructor's ValueError as a ConfigError on the key it names (``section.key``)."""
    message = str(err)
    key = next((k for k in sorted(params, key=len, reverse=True) if message.startswith(k)), None)
    if key is None:
        return ConfigError(fallback, value, message)
    return ConfigError(f"{section}.{key}", params[key], message)


def _check_keys(section: str, owner: str, params: dict[str, Any], allowed: tuple[str, ...],
                fixed: tuple[str, ...]) -> None:
    for key, value in params.items():
        if key not in allowed:
            keys = ", ".join((*fixed, *allowed))
            raise ConfigError(f"{section}.{key}", value, f"unknown key for {section} '{owner}'; allowed: {keys}",
                              did_you_mean(key, allowed))


def check_loss(config: ExperimentConfig) -> None:
    """The task loss: a known name, known keys, values its constructor accepts, a sane warm-up."""
    from itrlab.losses import LOSSES
    from itrlab.methods.base import build_task_loss

    loss = config.loss
    if loss.name not in LOSSES:
        raise ConfigError("loss.name", loss.name, f"known losses: {', '.join(sorted(LOSSES))}",
                          did_you_mean(loss.name, LOSSES))
    _check_keys("loss", loss.name, loss.params(), LOSSES.param_names(loss.name), ("name", "warmup_epochs", "warmup_loss"))
    if loss.warmup_epochs and loss.warmup_loss not in LOSSES:
        raise ConfigError("loss.warmup_loss", loss.warmup_loss, f"known losses: {', '.join(sorted(LOSSES))}",
                          did_you_mean(loss.warmup_loss, LOSSES))
    if loss.warmup_epochs >= config.train.epochs:
        raise ConfigError("loss.warmup_epochs", loss.warmup_epochs,
                          f"fewer than train.epochs ({config.train.epochs}), or the main loss '{loss.name}' never trains")
    try:
        build_task_loss(loss)
    except (ValueError, TypeError) as err:
        raise _bad_value("loss", loss.params(), ValueError(str(err)), "loss.name", loss.name) from None


def check_cooperative(config: ExperimentConfig) -> None:
    """The cooperative section: one of loss/strategy, a known name, its parameters, the scenario's needs."""
    cooperative = config.cooperative
    if cooperative is None:
        return
    from itrlab.losses import COOPERATIVE_LOSSES
    from itrlab.losses.boosting import DBL_STRATEGIES
    from itrlab.methods.registry import cooperative_loss

    fixed = ("scenario", "loss", "strategy", "branches", "weight", "anchor_checkpoint", "ema")
    if cooperative.strategy is not None:
        if cooperative.loss is not None:
            raise ConfigError("cooperative.loss", cooperative.loss, "give either cooperative.loss or cooperative.strategy, not both")
        if cooperative.strategy not in DBL_STRATEGIES:
            raise ConfigError("cooperative.strategy", cooperative.strategy,
                              f"DBL Table IV strategies: {', '.join(DBL_STRATEGIES)}")
        _check_keys("cooperative", f"strategy {cooperative.strategy}", cooperative.params(), ("gamma", "alpha"), fixed)
        owner = ("cooperative.strategy", cooperative.strategy)
    elif cooperative.loss is None:
        raise ConfigError("cooperative.loss", None, f"name a cooperative loss ({', '.join(sorted(COOPERATIVE_LOSSES))}) "
                          f"or a DBL strategy ({', '.join(DBL_STRATEGIES)})")
    elif cooperative.loss not in COOPERATIVE_LOSSES:
        raise ConfigError("cooperative.loss", cooperative.loss, f"known cooperative losses: {', '.join(sorted(COOPERATIVE_LOSSES))}",
                          did_you_mean(cooperative.loss, COOPERATIVE_LOSSES))
    else:
        _check_keys("cooperative", cooperative.loss, cooperative.params(),
                    COOPERATIVE_LOSSES.param_names(cooperative.loss), fixed)
        owner = ("cooperative.loss", cooperative.loss)
    try:
        cooperative_loss(cooperative)
    except (ValueError, TypeError) as err:
        raise _bad_value("cooperative", cooperative.params(), ValueError(str(err)), *owner) from None
    if cooperative.scenario in ("oas", "mss") and cooperative.branches != 2:
        raise ConfigError("cooperative.branches", cooperative.branches,
                          f"the {cooperative.scenario} scenario has exactly 2 branches; cohorts of more need oss")
    checkpoint = cooperative.anchor_checkpoint
    if checkpoint is not None and (cooperative.scenario != "oas" or not checkpoint.is_file()):
        allowed = "must be an existing checkpoint file (model.pt or best.pt of a plain run)" if cooperative.scenario == "oas" \
            else "only the oas scenario takes an anchor checkpoint"
        raise ConfigError("cooperative.anchor_checkpoint", str(checkpoint), allowed)


def check_method_config(config: ExperimentConfig) -> None:
    """Every name and parameter of ``config`` that the method layer will use."""
    from itrlab.eval import PROTOCOLS
    from itrlab.methods.registry import METHODS

    name = config.method.name
    if name not in METHODS:
        raise ConfigError("method.name", name, f"known methods: {', '.join(sorted(METHODS))}", did_you_mean(name, METHODS))
    check_loss(config)
    check_cooperative(config)
    METHODS[name].validate_config(config)
    for field in ("val_protocol", "test_protocol"):
        protocol = getattr(config.eval, field)
        if protocol not in PROTOCOLS:
            raise ConfigError(f"eval.{field}", protocol, f"known protocols: {', '.join(sorted(PROTOCOLS))}",
                              did_you_mean(protocol, PROTOCOLS))


def check_method_data(config: ExperimentConfig, summary) -> None:
    """The method's own checks against the data's sizes (registered with the config layer's check_data)."""
    from itrlab.methods.registry import METHODS

    if config.method.name in METHODS:
        METHODS[config.method.name].check_data(config, summary)


DATA_CHECKS.append(check_method_data)
