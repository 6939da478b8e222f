"""The dual encoder as a method: images and captions embedded apart, scored by one matrix product.

VSE, VSE++ (:mod:`itrlab.methods.vse`), MVN, ConVSE and ConVSE++ (:mod:`itrlab.methods.convse`) differ only in the loss
and the head: ``vse`` the sum of hinges (ConVSE paper eq. 2), ``vsepp`` the max of hinges (eq. 5), and with a projection
head ``mvn`` the multimodal NCE (same-modality negatives), ``convse`` l_CSN (eq. 6-8), ``convsepp`` l_CMN (eq. 12-14).
``configs/methods/<name>.yaml`` pairs them; any dual loss works with any of them. CODER builds on it.

Evaluation reads the encoders' output (``eval.embedding=output``) or the embedding before their projection head
(``prehead``: the base network's, SimCLR's reading); :meth:`DualEncoderMethod.prehead_reading` gives the latter beside
the former (``eval.log_prehead``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from typing import ClassVar

import torch
from torch import Tensor

from itrlab.config import ExperimentConfig
from itrlab.config.schema import PREHEAD, TextEncoderConfig
from itrlab.data import Batch, PrecompSplit, Vocabulary, eval_loaders
from itrlab.eval import ScoreFn, dense_score_fn
from itrlab.losses import Similarities
from itrlab.methods.base import MethodModule, build_task_loss
from itrlab.methods.context import BuildContext
from itrlab.models import DualEncoder
from itrlab.models.text_factory import TextEncoderSpec


def text_encoder_spec(text: TextEncoderConfig) -> TextEncoderSpec:
    """The text encoder a config's ``model.text`` section asks for (BiGRU, GloVe-BiGRU, BERT or stored states)."""
    return TextEncoderSpec(
        encoder=text.encoder,
        word_dim=text.word_dim,
        num_layers=text.num_layers,
        pooling=text.pooling,
        glove=text.glove,
        bert_path=text.bert_path,
        freeze=text.freeze,
        mlp_hidden=text.mlp_hidden,
    )


class DualEncoderMethod(MethodModule):
    name = "dual"
    embeds_apart = True  # images and captions have embeddings of their own: a trained model embeds either
    reads_prehead: ClassVar[bool] = True

    def __init__(self, model: DualEncoder, loss: torch.nn.Module, max_len: int = 64):
        super().__init__()
        self.model = model
        self.loss = loss
        self.max_len = max_len
        self.embedding = "output"  # what evaluation reads (eval.embedding): the output, or before the head

    @classmethod
    def from_config(cls, config: ExperimentConfig, context: BuildContext) -> DualEncoderMethod:
        model = DualEncoder.build(
            feature_dim=context.feature_dim,
            vocab_size=context.vocab_size,
            embed_dim=config.model.embed_dim,
            image_pooling=config.model.image.pooling,
            projection_hidden=config.model.projection_hidden,
            text=text_encoder_spec(config.model.text),
        )
        method = cls(model, build_task_loss(config.loss), config.model.text.max_len)
        method.embedding = config.eval.embedding
        method.name = config.method.name
        method.text_lr = config.model.text.lr
        return method

    def similarities(
        self, image_emb: Tensor, caption_emb: Tensor, image_ids: Tensor, same_modality: bool = False
    ) -> Similarities:
        return Similarities(
            i2t=image_emb @ caption_emb.T,
            image_ids=image_ids,
            i2i=image_emb @ image_emb.T if same_modality else None,
            t2t=caption_emb @ caption_emb.T if same_modality else None,
        )

    def batch_similarities(self, batch: Batch, needs: Iterable[str] = ()) -> Similarities:
        image_emb, caption_emb = self.model(batch.images, batch.tokens, batch.lengths)
        needs = set(needs)
        return self.similarities(image_emb, caption_emb, batch.image_ids, bool(needs & {"i2i", "t2t"}))

    @torch.no_grad()
    def encode_split(
        self,
        split: PrecompSplit,
        vocab: Vocabulary,
        batch_size: int,
        encode_images: Callable[[Tensor], Tensor],
        encode_captions: Callable[[Tensor, Tensor], Tensor],
    ) -> tuple[Tensor, Tensor]:
        """``encode_images`` of every image (N, ...) and ``encode_captions`` of every caption (cpi·N, ...)
        of a split, in split order, in eval mode."""
        was_training = self.training
        self.eval()
        device = next(self.parameters()).device
        image_batches, caption_batches = eval_loaders(split, vocab, batch_size, self.max_len)
        images = torch.cat([encode_images(batch.images.to(device)) for batch in image_batches])
        captions = torch.cat(
            [encode_captions(batch.tokens.to(device), batch.lengths.to(device)) for batch in caption_batches]
        )
        self.train(was_training)
        return images, captions

    @property
    def through_head(self) -> bool:
        """Whether evaluation reads the embeddings through the projection head (``eval.embedding=output``)."""
        return self.embedding != PREHEAD

    def embed_images(self, images: Tensor) -> Tensor:
        """The embeddings (B, d) of a batch of region features (B, R, D): what the split's scores compare."""
        return self.model.encode_images(images, head=self.through_head)

    def embed_captions(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        """The embeddings (B, d) of a batch of encoded captions (token ids, or stored token states)."""
        return self.model.encode_captions(tokens, lengths, head=self.through_head)

    def embed_split(self, split: PrecompSplit, vocab: Vocabulary, batch_size: int) -> tuple[Tensor, Tensor]:
        """Embeddings of every image (N, d) and every caption (cpi·N, d) of a split."""
        return self.encode_split(split, vocab, batch_size, self.embed_images, self.embed_captions)

    def score_fn(self, split: PrecompSplit, vocab: Vocabulary, batch_size: int) -> ScoreFn:
        return dense_score_fn(*self.embed_split(split, vocab, batch_size))

    def prehead_reading(self) -> PreheadReading:
        """This method read before its projection head (``eval.log_prehead``), its own reading unchanged."""
        return PreheadReading(self)


class PreheadReading:
    """A dual encoder's scores of a split from the embeddings before its projection head (the base network's; in
    a model without a head, its embeddings): what ``eval.log_prehead`` logs beside the run's own reading."""

    def __init__(self, method: DualEncoderMethod):
        self.method = method

    def score_fn(self, split: PrecompSplit, vocab: Vocabulary, batch_size: int) -> ScoreFn:
        model = self.method.model
        images, captions = partial(model.encode_images, head=False), partial(model.encode_captions, head=False)
        return dense_score_fn(*self.method.encode_split(split, vocab, batch_size, images, captions))
