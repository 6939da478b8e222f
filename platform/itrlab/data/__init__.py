"""Data: the SCAN precomp layout, vocabulary, torch batches and the synthetic generator."""

from itrlab.data.dataset import (
    Batch,
    CaptionDataset,
    CaptionTextDataset,
    ImageBatch,
    ImageDataset,
    TextBatch,
    collate,
    collate_images,
    collate_texts,
    eval_loaders,
    make_loader,
)
from itrlab.data.precomp import PrecompSplit, SplitInfo, inspect_precomp, open_precomp
from itrlab.data.synthetic import SIZES, SyntheticSpec, generate_synthetic, synthetic_spec
from itrlab.data.vocab import Vocabulary, tokenize

__all__ = [
    "Batch", "CaptionDataset", "CaptionTextDataset", "ImageBatch", "ImageDataset", "TextBatch",
    "collate", "collate_images", "collate_texts", "eval_loaders", "make_loader",
    "PrecompSplit", "SplitInfo", "inspect_precomp", "open_precomp",
    "SIZES", "SyntheticSpec", "generate_synthetic", "synthetic_spec",
    "Vocabulary", "tokenize",
]
