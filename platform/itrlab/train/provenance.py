"""What a run folder was trained on, and what ``jobs/train.py --resume`` may change of it.

A run folder records its resolved config (``config.yaml``) and the digest of its data (:data:`PROVENANCE`,
:func:`itrlab.data.precomp.fingerprint`, written once the data is opened). A resume runs that config on that
data: an override, another data folder or data that changed under the same folder, or a code version whose
config schema adds, drops or re-defaults a key would train something else into the run's checkpoints and
MLflow run (and overwrite a finished run's test table). Such a resume is refused with one line naming the
first difference, before the MLflow run is reopened, unless ``--allow-changes``: then the run records them
(param ``resume.<n>.changes``, tag ``itrlab.resume_changes``). ``train.epochs`` may always change: training
longer is what a resume is for.
"""

from __future__ import annotations

from pathlib import Path

from itrlab.config import ExperimentConfig
from itrlab.config.loader import read_yaml
from itrlab.config.schema import differences, flatten
from itrlab.data.precomp import fingerprint
from itrlab.errors import UserInputError
from itrlab.files import atomic_write_json, read_json

PROVENANCE = "provenance.json"
FREE_ON_RESUME = ("train.epochs",)


def data_digest(config: ExperimentConfig) -> str | None:
    """The digest of the run's data folder (None while it does not exist: synthetic data not generated yet)."""
    root = Path(config.dataset.root)
    return fingerprint(root) if root.is_dir() else None


def record_data(run_dir: Path, config: ExperimentConfig) -> None:
    """Write what data the run trains on (when it starts training, beside its config.yaml: a resume that was
    refused never gets this far)."""
    digest = data_digest(config)
    if digest is not None:
        atomic_write_json(run_dir / PROVENANCE, {"data": {"root": str(config.dataset.root), "digest": digest}})


def resume_changes(run_dir: Path, config: ExperimentConfig) -> list[str]:
    """How ``config`` (the run's config.yaml with this resume's overrides, under this code) and its data differ
    from what the run recorded; ``train.epochs`` aside."""
    recorded = {k: v for k, v in flatten(read_yaml(run_dir / "config.yaml", "--resume")).items()
                if k not in FREE_ON_RESUME}
    now = {k: v for k, v in config.flat().items() if k not in FREE_ON_RESUME}
    lines = differences(recorded, now, "the config's ")
    if (run_dir / PROVENANCE).is_file():
        data = read_json(run_dir / PROVENANCE, "the run's data record").get("data") or {}
        digest = data_digest(config)
        if digest is not None and data.get("digest") not in (None, digest):
            lines.append(f"the data in {config.dataset.root}: recorded digest {data['digest']} (of "
                         f"{data.get('root')}), now {digest}")
    return lines


def check_resume(run_dir: Path, config: ExperimentConfig, allow: bool) -> list[str]:
    """The changes this resume makes (accepted with ``allow``), or a UserInputError naming the first."""
    lines = resume_changes(run_dir, config)
    if lines and not allow:
        raise UserInputError(f"--resume {run_dir}: {lines[0]}" + (f" (and {len(lines) - 1} more)" if lines[1:] else "")
                             + "; a resume trains the run it continues: resume without the change, pass "
                               "--allow-changes to train it so (recorded on the MLflow run), or start a new run "
                               "(train.epochs may change)")
    return lines
