"""Retrieval losses two or more papers share: pure functions of batch similarity matrices.

Each loss is an ``nn.Module`` whose ``forward(sims: Similarities) -> LossOutput`` (see
``docs/architecture.md``, "Contracts"); look one up by name with :func:`build_loss`. A paper's own
losses live in its package (``itrlab.methods.<paper>.losses``) and declare themselves in the same
registries when :mod:`itrlab.methods` is imported.

The registries and the losses' declared settings come without torch (:mod:`.registry`,
:mod:`.settings`); the other exports are imported when first used (:mod:`itrlab.lazy`).
"""

from itrlab.lazy import lazy_exports
from itrlab.losses import settings as _settings  # noqa: F401  (declares the shared losses' settings)
from itrlab.losses.registry import (
    LOSSES,
    LossRegistry,
    LossSettings,
    build_loss,
    loss_param_names,
    register_loss,
    registered_loss_classes,
)

_EXPORTS = {
    **dict.fromkeys(
        [
            "LossOutput",
            "RetrievalLoss",
            "Similarities",
            "hardest_negative",
            "hardest_negative_hinge",
            "hinge",
            "masked_logsumexp",
            "masked_sum",
            "nce_term",
            "negative_mask",
            "positive_mask",
            "positive_scores",
        ],
        "base",
    ),
    "WarmupLoss": "warmup",
    **dict.fromkeys(["MaxOfHingesLoss", "SumOfHingesLoss"], "triplet"),
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = [
    "LOSSES",
    "LossRegistry",
    "LossSettings",
    "build_loss",
    "loss_param_names",
    "register_loss",
    "registered_loss_classes",
    *_EXPORTS,
]
