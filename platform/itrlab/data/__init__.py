"""Data: the SCAN precomp layout, vocabulary, torch batches and the synthetic generator.

The exports are imported when first used (:mod:`itrlab.lazy`): ``itrlab.data.synthetic``'s argument
parser does not pull in torch's batches."""

from itrlab.lazy import lazy_exports

_EXPORTS = {
    **dict.fromkeys(
        [
            "Batch",
            "CaptionDataset",
            "CaptionTextDataset",
            "ImageBatch",
            "ImageDataset",
            "TextBatch",
            "collate",
            "collate_images",
            "collate_texts",
            "eval_loaders",
            "make_loader",
        ],
        "dataset",
    ),
    **dict.fromkeys(["PrecompSplit", "SplitInfo", "inspect_precomp", "open_precomp"], "precomp"),
    **dict.fromkeys(["SIZES", "SyntheticSpec", "generate_synthetic", "synthetic_spec"], "synthetic"),
    **dict.fromkeys(["Vocabulary", "tokenize"], "vocab"),
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)
