"""A trial's saved state in the sweep's storage, the one record a retry and ``--resume`` continue from.

Each trial has a folder ``<sweep>/trials/<key>/`` named by its grid point (:func:`trial_key`: the same in every
invocation, whatever id Tune gives it). After each epoch the trial saves a copy of its working folder there as
``epoch_<N>/`` (written under a temporary name, then renamed), then ``latest.json`` (atomic), which names the copy
and lists every result reported up to it: a crash at any moment leaves the previous copy named and intact. A
starting trial restores the newest copy and reports its results again, in order (:meth:`TrialStore.restore`), so
the scheduler, search and progress line see it as it was. An ended trial leaves ``final.json``
(:meth:`TrialStore.finish`), and one the scheduler stopped a mark (:meth:`TrialStore.stop`): a resume trains
neither. Nothing here is unpickled: weights-only checkpoints and JSON.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from itrlab.errors import DataError, StorageError, disk_full, failure_reason, no_space
from itrlab.files import atomic_write_json, file_lock, read_json

TRIALS_FOLDER = "trials"  # under the sweep's folder
LATEST = "latest.json"
FINAL = "final.json"
POINT_FILE = "point.json"  # the trial's grid point, as Tune handed it
RECORD_LIMIT = 64 << 20  # bytes: a record larger than this was not written by itrlab


def trial_key(point: dict[str, Any]) -> str:
    """The name of a trial's folder: a digest of its grid point (dotted keys, named rows, seed), stable across
    invocations and the same on the driver and in the trial."""
    text = json.dumps(point, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class TrialStore:
    """The saved state of one trial (see the module doc) in ``<sweep_dir>/trials/<key>/``."""

    def __init__(self, sweep_dir: str | Path, key: str):
        self.key = key
        self.folder = Path(sweep_dir) / TRIALS_FOLDER / key

    def held(self):
        """The trial's hold on its folder while it runs: a second trial of the same point (a search that asks for
        a configuration again) waits for it, then reports its result. The lock is on the folder itself, opened
        read-only: no file of the storage stays open for writing while the trial runs."""
        self.folder.mkdir(parents=True, exist_ok=True)
        return file_lock(self.folder, blocking=True)

    def begin(self, point: dict[str, Any]) -> None:
        """Record the trial's grid point (the report of a resumed search lists a configuration it does not run
        again by it)."""
        if not (self.folder / POINT_FILE).is_file():
            self.folder.mkdir(parents=True, exist_ok=True)
            atomic_write_json(self.folder / POINT_FILE, point, indent=None)

    def point(self) -> dict[str, Any] | None:
        """The trial's grid point as recorded (None before it started)."""
        return self._read(POINT_FILE, ())

    def save(self, epoch: int, working: Path, reports: list[dict[str, Any]]) -> None:
        """The working folder as the trial's copy after ``epoch``, with every result reported up to it; a
        StorageError (a full or read-only disk) when the storage does not take it, the previous copy kept."""
        name = f"epoch_{epoch:05d}"
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            staging = self.folder / f".{name}.partial"
            shutil.rmtree(staging, ignore_errors=True)
            shutil.copytree(working, staging)
            shutil.rmtree(self.folder / name, ignore_errors=True)
            staging.rename(self.folder / name)
            atomic_write_json(self.folder / LATEST, {"epoch": epoch, "copy": name, "reports": reports}, indent=None)
        except OSError as err:
            why = no_space(self.folder) if disk_full(err) else err.strerror or failure_reason(err)
            raise StorageError(
                f"the checkpoint of epoch {epoch} cannot be stored in the sweep's storage: {why}"
            ) from None
        for old in self.folder.glob("epoch_*"):
            if old.name != name:
                shutil.rmtree(old, ignore_errors=True)

    def latest(self) -> dict[str, Any] | None:
        """What ``latest.json`` holds (the newest copy's name, its epoch and the reports up to it); None without
        one. A record that is not one itrlab wrote is a StorageError naming it."""
        return self._read(LATEST, ("copy", "reports"))

    def restore(self, working: Path) -> list[dict[str, Any]]:
        """Copy the newest saved copy into ``working`` (nothing without one) and return the results reported up
        to it, oldest first."""
        latest = self.latest()
        if latest is None:
            return []
        shutil.copytree(self.folder / latest["copy"], working, dirs_exist_ok=True)
        return list(latest["reports"])

    def reports(self) -> list[dict[str, Any]]:
        """The results reported up to the newest copy, oldest first (none without one)."""
        latest = self.latest()
        return list(latest["reports"]) if latest else []

    def finish(self, result: dict[str, Any]) -> None:
        """Record the trial's last result: it ended, and a resumed sweep reports it again without training."""
        self.folder.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.folder / FINAL, result, indent=None)

    def final(self) -> dict[str, Any] | None:
        """The trial's last result, once it ended (None while it has not)."""
        return self._read(FINAL, ())

    def stop(self, reason: str) -> None:
        """Record that the scheduler stopped the trial early (its reports so far are its result)."""
        reports = self.reports()
        self.finish({**(reports[-1] if reports else {}), "stopped": 1, "stop_reason": reason})

    def _read(self, name: str, keys: tuple[str, ...]) -> dict[str, Any] | None:
        path = self.folder / name
        if not path.is_file():
            return None
        record = read_json(path, f"the trial's {name}", max_bytes=RECORD_LIMIT)
        if not isinstance(record, dict) or any(key not in record for key in keys):
            raise DataError(path, f"not a trial's {name} as itrlab writes it")
        return record


def stored_trials(sweep_dir: str | Path) -> list[TrialStore]:
    """Every trial the sweep's folder holds a saved state of."""
    root = Path(sweep_dir) / TRIALS_FOLDER
    return [TrialStore(sweep_dir, folder.name) for folder in sorted(root.glob("*")) if folder.is_dir()]


def ended_trials(sweep_dir: str | Path) -> dict[str, dict[str, Any]]:
    """The last result of every trial of the sweep's folder that ended, by key."""
    return {store.key: final for store in stored_trials(sweep_dir) if (final := store.final()) is not None}
