"""What a run folder was trained on, and what ``jobs/train.py --resume`` may change of it
(docs/training.md#resume).

A run folder records its resolved config (``config.yaml``) and the digest of its data (:data:`PROVENANCE`,
:func:`itrlab.data.precomp.fingerprint`, written once the data is opened). A resume that would train something
else into the run's checkpoints and MLflow run (an override, other data, a code version whose config schema adds,
drops or re-defaults a key) is refused with one line naming the first difference, unless ``--allow-changes``
(then the run records them); ``train.epochs`` may always change. A change of what the test results are computed
on (:data:`EVALUATION_KEYS`, the data's digest; the same data in another folder is none) is refused even then: an
evaluation on other data is a new record. A FINISHED run (:data:`TEST_RECALL`) is never rewritten unasked: only a
larger ``train.epochs`` trains it further.
"""

from __future__ import annotations

from pathlib import Path

from itrlab.config import ExperimentConfig
from itrlab.config.loader import read_yaml
from itrlab.config.schema import differences, flatten
from itrlab.data.precomp import fingerprint
from itrlab.errors import UserInputError
from itrlab.eval import RecallTable
from itrlab.files import atomic_write_json, read_json

PROVENANCE = "provenance.json"
TEST_RECALL = "test_recall.json"  # a finished run's test table, written once its test was evaluated
FREE_ON_RESUME = ("train.epochs",)
EVALUATION_KEYS = ("dataset.", "eval.test_protocol")  # what the test results were computed on


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


def _recorded_config(run_dir: Path) -> dict[str, str]:
    return flatten(read_yaml(run_dir / "config.yaml", "--resume"))


def _digests(run_dir: Path, config: ExperimentConfig) -> tuple[str | None, str | None]:
    """(the data digest the run recorded, that of the data ``config`` names now): None where there is none."""
    if not (run_dir / PROVENANCE).is_file():
        return None, None
    recorded = (read_json(run_dir / PROVENANCE, "the run's data record").get("data") or {}).get("digest")
    return recorded, data_digest(config)


def _data_change(run_dir: Path, config: ExperimentConfig) -> str | None:
    """The line saying the data's digest differs from the recorded one (None: the same, or nothing recorded)."""
    recorded, digest = _digests(run_dir, config)
    if digest is not None and recorded not in (None, digest):
        root = read_json(run_dir / PROVENANCE, "the run's data record")["data"].get("root")
        return f"the data in {config.dataset.root}: recorded digest {recorded} (of {root}), now {digest}"
    return None


def resume_changes(run_dir: Path, config: ExperimentConfig) -> list[str]:
    """How ``config`` (the run's config.yaml with this resume's overrides, under this code) and its data differ
    from what the run recorded; ``train.epochs`` aside."""
    recorded = {k: v for k, v in _recorded_config(run_dir).items() if k not in FREE_ON_RESUME}
    now = {k: v for k, v in config.flat().items() if k not in FREE_ON_RESUME}
    lines = differences(recorded, now, "the config's ")
    data = _data_change(run_dir, config)
    return [*lines, data] if data else lines


def evaluation_changes(run_dir: Path, config: ExperimentConfig) -> list[str]:
    """How this resume would change what the run's test results are computed on: its data (the ``dataset``
    section or the data's digest; a folder moved with the same digest aside) or its test protocol."""

    def evaluated(flat: dict[str, str]) -> dict[str, str]:
        return {k: v for k, v in flat.items() if k.startswith(EVALUATION_KEYS)}

    recorded, now = evaluated(_recorded_config(run_dir)), evaluated(config.flat())
    data = _data_change(run_dir, config)
    was, digest = _digests(run_dir, config)
    if was is not None and was == digest:  # the same data, perhaps in another folder
        recorded.pop("dataset.root", None), now.pop("dataset.root", None)
    lines = differences(recorded, now, "the config's ")
    return [*lines, data] if data else lines


def check_resume(run_dir: Path, config: ExperimentConfig, allow: bool) -> list[str]:
    """The changes this resume makes (accepted with ``allow``), or a UserInputError naming the first. A change
    of the data or the test protocol is refused even with ``allow``."""
    evaluation = evaluation_changes(run_dir, config)
    if evaluation:
        raise UserInputError(
            f"--resume {run_dir}: {evaluation[0]}"
            + (f" (and {len(evaluation) - 1} more)" if evaluation[1:] else "")
            + "; the run's test results belong to its data and test protocol: an evaluation on "
            "other data or under another protocol is a new record, never a change of this run "
            "(also with --allow-changes): resume without it, or start a new run"
        )
    lines = resume_changes(run_dir, config)
    if lines and not allow:
        raise UserInputError(
            f"--resume {run_dir}: {lines[0]}"
            + (f" (and {len(lines) - 1} more)" if lines[1:] else "")
            + "; a resume trains the run it continues: resume without the change, pass "
            "--allow-changes to train it so (recorded on the MLflow run), or start a new run "
            "(train.epochs may change)"
        )
    return lines


def finished_resume(run_dir: Path, config: ExperimentConfig) -> str | None:
    """The line a ``--resume`` of a FINISHED run (its test table recorded) prints when it has nothing to train:
    it changes nothing recorded. None when the resume trains: the run did not finish, or a larger
    ``train.epochs`` asks to train it further."""
    path = run_dir / TEST_RECALL
    epochs = int(_recorded_config(run_dir).get("train.epochs", "0"))
    if not path.is_file() or config.train.epochs > epochs:
        return None
    try:
        test = RecallTable.from_dict(read_json(path, "the run's test table"))
        result = f"test rsum {test.rsum:.1f}, protocol {test.protocol}"
    except (UserInputError, ValueError, TypeError, AttributeError):
        result = f"its test table in {path}"
    return (
        f"itrlab: {run_dir} finished after {epochs} epochs ({result}): --resume has nothing to train and "
        f"changed nothing recorded (a larger train.epochs trains it further)"
    )
