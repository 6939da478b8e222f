"""itrlab: a Ray-distributed experiment platform for image-text retrieval research."""

from itrlab import threads as _threads

__version__ = "0.1.0"

# OpenMP reads its wait policy once, when torch loads it: set it before any module of the package can
# import torch, so every entry point (jobs/*.py, itrlab ..., Ray workers, tests) gets it (itrlab.threads)
_threads.configure_env()


def load_model(source, tracking_uri: str | None = None):
    """A trained model (``runs:/<id>/model``, a run id, a run folder or a model folder): embeds image features
    and captions, scores pairs (:class:`itrlab.trained.TrainedModel`, docs/models.md)."""
    from itrlab.trained.sources import load_model as load

    return load(source, tracking_uri)
