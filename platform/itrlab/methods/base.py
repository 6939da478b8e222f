"""What every training method provides to the trainer and the evaluator.

A method owns its encoders and losses. The trainer calls ``method(batch)`` for a
:class:`~itrlab.losses.LossOutput`, steps the optimizer over ``method.parameters()``, and asks
``method.score_fn(split, vocab)`` for a :data:`~itrlab.eval.ScoreFn` over a whole split; the
evaluator ranks with it block by block. Dense methods embed once and score by matrix products;
interaction methods (later) score image-caption blocks in shards.
"""

from __future__ import annotations

from typing import Protocol

from torch import nn

from itrlab.data import Batch, PrecompSplit, Vocabulary
from itrlab.eval import ScoreFn
from itrlab.losses import LossOutput, Similarities


class Method(Protocol):
    name: str

    def __call__(self, batch: Batch) -> LossOutput: ...

    def score_fn(self, split: PrecompSplit, vocab: Vocabulary, batch_size: int) -> ScoreFn: ...

    def parameters(self): ...


class MethodModule(nn.Module):
    """Base class of methods implemented as one torch module.

    Hooks the trainer calls, with defaults that fit a single-branch method:
    ``param_groups(lr)`` (what the optimizer updates, and with which learning rate),
    ``after_step(step, total_steps)`` (after every optimizer step: EMA anchors),
    ``auxiliary_evaluators()`` (other branches to evaluate beside the model: anchors).
    """

    name = "method"
    loss: nn.Module  # the single-branch task loss, forward(Similarities) -> LossOutput

    def batch_similarities(self, batch: Batch, same_modality: bool = False) -> Similarities:
        """The batch's similarity matrices (``i2i``/``t2t`` too when ``same_modality``)."""
        raise NotImplementedError

    def forward(self, batch: Batch) -> LossOutput:
        """The task loss of one batch."""
        return self.loss(self.batch_similarities(batch, getattr(self.loss, "needs_same_modality", False)))

    def exported_model(self) -> nn.Module:
        """What is checkpointed as "the model" (a cooperative scheme's target branch)."""
        return self

    def param_groups(self, lr: float) -> list[dict]:
        return [{"params": [p for p in self.parameters() if p.requires_grad], "lr": lr}]

    def after_step(self, step: int, total_steps: int) -> None:
        """Called after optimizer step ``step`` (1-based) of ``total_steps``."""

    def auxiliary_evaluators(self) -> dict[str, "MethodModule"]:
        """Branches evaluated and logged beside the model, by name (prefix of their metrics)."""
        return {}
