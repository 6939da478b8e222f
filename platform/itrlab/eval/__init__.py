"""Evaluation: block-wise ranks of a whole split, recall tables and the protocols of the SCAN/VSE++ lineage
(docs/evaluation.md). Scores come from a :data:`ScoreFn` called once per block of images, never per query::

    table = evaluate_embeddings(image_emb, caption_emb, protocol="coco_1k")
    table = evaluate(score_fn, n_images, protocol="f30k_1k", image_chunk=512)
    mlflow_metrics = table.metrics(prefix="test_")

The exports are imported when first used (:mod:`itrlab.lazy`): the metric names and protocols come without torch.
"""

from itrlab.lazy import lazy_exports

_EXPORTS = {
    **dict.fromkeys(["PROTOCOLS", "Protocol", "ProtocolError", "get_protocol"], "protocols"),
    **dict.fromkeys(["DEFAULT_IMAGE_CHUNK", "Ranks", "ScoreFn", "compute_ranks", "dense_score_fn"], "ranking"),
    "METRIC_NAMES": "names",
    **dict.fromkeys(
        ["RecallTable", "evaluate", "evaluate_embeddings", "rank_folds", "table_from_folds", "table_from_ranks"],
        "recall",
    ),
    **dict.fromkeys(
        ["random_embeddings", "reference_evaluate", "reference_rank_folds", "reference_ranks"], "reference"
    ),
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)
