"""itrlab: a Ray-distributed experiment platform for image-text retrieval research."""

from itrlab import console_log as _console_log
from itrlab import interrupts as _interrupts
from itrlab import threads as _threads

__version__ = "0.1.0"

# OpenMP reads its wait policy once, when torch loads it: set it before any module of the package can
# import torch, so every entry point (jobs/*.py, itrlab ..., Ray workers, tests) gets it (itrlab.threads)
_threads.configure_env()
# a process that a command-line program started (a Ray worker of its sweep) shows its log records as the
# program's console does (itrlab.console_log), and its exit at the program's stop stays off the console
# (itrlab.interrupts); any other process leaves both to the program that embeds itrlab
if _console_log.follow():
    _interrupts.worker_exit_quiet()


def load_model(source, tracking_uri: str | None = None):
    """A trained model (``runs:/<id>/model``, a run id, a run folder or a model folder): embeds image features
    and captions, scores pairs (:class:`itrlab.trained.TrainedModel`, docs/models.md)."""
    from itrlab.trained.sources import load_model as load

    return load(source, tracking_uri)
