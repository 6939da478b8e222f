"""A sweep's storage that stops taking writes (a full disk, a disk turned read-only, its folder replaced): the
sweep ends on one line that says what broke (a full disk named as one), its runs
FAILED with that reason, instead of Tune's repeated tracebacks."""

from __future__ import annotations

from pathlib import Path

from ray import tune

from itrlab.errors import StorageError, UserInputError, disk_full, failure_reason, no_space, one_line_logs
from itrlab.files import check_writable_dir

# Tune's storage-sync errors repeat the same OSError with a traceback at every attempt; the sweep ends
# with one line that says what broke
one_line_logs("ray.tune.execution.experiment_state", "ray.train._internal.syncer")


def fit_checking_storage(tuner: tune.Tuner, sweep_dir: Path):
    """``tuner.fit()``; a sweep folder that can no longer be written (a disk turned read-only, a folder
    replaced) becomes one clear error instead of Tune's traceback. The trials' runs end FAILED (their
    checkpoints could not be stored) and the parent FAILED with this reason."""
    try:
        return tuner.fit()
    except OSError as err:
        if disk_full(err):
            raise StorageError(
                f"the sweep's storage can no longer be written: {storage_failure(err, sweep_dir)}; "
                f"--resume continues the sweep once it can"
            ) from None
        try:
            check_writable_dir(sweep_dir / "tune", "--storage")
        except UserInputError as unwritable:
            raise StorageError(
                f"the sweep's storage can no longer be written: {unwritable}; {failure_reason(err)}"
            ) from None
        raise


def storage_failure(err: OSError, sweep_dir: Path) -> str:
    """What broke in the sweep's storage, on one line: a full disk as ``no space left on <the sweep's folder>``."""
    return no_space(sweep_dir) if disk_full(err) else f"{err.strerror or err}: {err.filename}"
