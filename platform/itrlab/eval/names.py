"""The names of a recall table's metrics (no torch: a sweep file's objective and columns are checked
against them before anything heavy is imported)."""

# RecallTable field -> MLflow-safe metric name (MLflow refuses '@').
METRIC_NAMES = {
    "i2t_r1": "i2t_R1",
    "i2t_r5": "i2t_R5",
    "i2t_r10": "i2t_R10",
    "t2i_r1": "t2i_R1",
    "t2i_r5": "t2i_R5",
    "t2i_r10": "t2i_R10",
    "rsum": "rsum",
    "i2t_medr": "i2t_medr",
    "i2t_meanr": "i2t_meanr",
    "t2i_medr": "t2i_medr",
    "t2i_meanr": "t2i_meanr",
    "md": "md",
}
# the six recalls in the papers' column order: R@1, R@5, R@10 image to text, then text to image
RECALLS = tuple(METRIC_NAMES[field] for field in ("i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10"))
# the two ranking directions, in the tables' order, and their words
DIRECTIONS = {"i2t": "image->text", "t2i": "text->image"}
