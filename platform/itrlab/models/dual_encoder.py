"""The dual encoder: independent image and caption embeddings compared by cosine similarity."""

from __future__ import annotations

from torch import Tensor, nn

from itrlab.models.encoders import ProjectionHead, RegionEncoder
from itrlab.models.text_factory import TextEncoderSpec


class DualEncoder(nn.Module):
    """Embeds images and captions into one space; similarity is the dot product of unit vectors."""

    def __init__(self, image_encoder: nn.Module, text_encoder: nn.Module):
        super().__init__()
        self.image_encoder = image_encoder
        self.text_encoder = text_encoder

    @classmethod
    def build(
        cls,
        *,
        feature_dim: int,
        vocab_size: int,
        embed_dim: int,
        image_pooling: str,
        projection_hidden: int | None,
        text: TextEncoderSpec = TextEncoderSpec(),
    ) -> DualEncoder:
        """Region encoder, then the text encoder ``text`` describes (BiGRU, GloVe-BiGRU or BERT)."""
        image_encoder = RegionEncoder(feature_dim, embed_dim, image_pooling, projection_hidden)
        return cls(
            image_encoder, text.build(vocab_size=vocab_size, embed_dim=embed_dim, projection_hidden=projection_hidden)
        )

    @property
    def has_head(self) -> bool:
        """Whether the embeddings pass through a projection head (``model.projection_hidden``) before their norm."""
        return any(isinstance(encoder.head, ProjectionHead) for encoder in (self.image_encoder, self.text_encoder))

    def encode_images(self, regions: Tensor, head: bool = True) -> Tensor:
        """Unit embeddings (B, d) of region features: through the projection head, or before it (``head=False``)."""
        return self.image_encoder(regions, head=head)

    def encode_captions(self, tokens: Tensor, lengths: Tensor, head: bool = True) -> Tensor:
        """Unit embeddings (B, d) of encoded captions: through the projection head, or before it (``head=False``)."""
        return self.text_encoder(tokens, lengths, head=head)

    def forward(self, regions: Tensor, tokens: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        return self.encode_images(regions), self.encode_captions(tokens, lengths)

    @staticmethod
    def similarity(image_emb: Tensor, caption_emb: Tensor) -> Tensor:
        """Cosine similarity matrix S[i, j] of image i and caption j (inputs are unit vectors)."""
        return image_emb @ caption_emb.T
