"""Encoders: region features and word ids to embeddings."""

from itrlab.models.dual_encoder import DualEncoder
from itrlab.models.encoders import GRUTextEncoder, ProjectionHead, RegionEncoder
from itrlab.models.pooling import GPO, MeanPooling, build_pooling

__all__ = ["DualEncoder", "GPO", "GRUTextEncoder", "MeanPooling", "ProjectionHead", "RegionEncoder", "build_pooling"]
