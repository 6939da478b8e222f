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
from itrlab.losses import LossOutput


class Method(Protocol):
    name: str

    def __call__(self, batch: Batch) -> LossOutput: ...

    def score_fn(self, split: PrecompSplit, vocab: Vocabulary, batch_size: int) -> ScoreFn: ...

    def parameters(self): ...


class MethodModule(nn.Module):
    """Base class of methods implemented as one torch module."""

    name = "method"
