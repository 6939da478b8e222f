"""Look up retrieval losses by name (the keys used in method configs)."""

from __future__ import annotations

import inspect

from torch import nn

from .contrastive import (
    ContrastiveMaxOfNegativesLoss,
    ContrastiveSumOfNegativesLoss,
    MultimodalNCELoss,
)
from .triplet import MaxOfHingesLoss, SumOfHingesLoss

LOSSES: dict[str, type] = {
    cls.name: cls
    for cls in (
        SumOfHingesLoss,
        MaxOfHingesLoss,
        MultimodalNCELoss,
        ContrastiveSumOfNegativesLoss,
        ContrastiveMaxOfNegativesLoss,
    )
}


def _loss_class(name: str) -> type:
    try:
        return LOSSES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown loss {name!r}; known losses: {', '.join(sorted(LOSSES))}") from None


def loss_param_names(name: str) -> tuple[str, ...]:
    """Names of the constructor parameters of the loss ``name`` (e.g. ``("margin", "tau")``)."""
    signature = inspect.signature(_loss_class(name).__init__)
    return tuple(p for p in signature.parameters if p != "self")


def build_loss(name: str, **params: float) -> nn.Module:
    """Build the loss registered as ``name`` with ``params`` (unset ones keep their defaults).

    Raises:
        ValueError: unknown name, a parameter the loss does not take, or a value out of range.
    """
    cls = _loss_class(name)
    allowed = loss_param_names(name)
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(
            f"loss {name!r} takes no parameter(s) {', '.join(unknown)}; "
            f"it takes: {', '.join(allowed) or 'none'}"
        )
    return cls(**params)
