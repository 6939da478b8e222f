"""What ``--resume`` continues, and the proof that it runs what the sweep's first invocation recorded.

Each invocation's folder ``<storage>/<sweep>/<timestamp>/`` holds its state file (:data:`STATE_FILE`): the MLflow
parent run, the overrides, ``started_at`` (seconds since the epoch), ``status`` (RUNNING until the driver ends the
parent run) and what it runs (:func:`invocation_record`: the sweep's settings, the flattened resolved config of its
base trial, the data's digest). ``--resume`` without a name continues the newest unfinished invocation
(:func:`pick`); a finished one only by its name. A resume whose sweep differs from the record (:func:`changes`) is
refused with one line naming the first difference, unless ``--allow-changes`` (the parent run then records it);
what names the trials (grid, seeds, Optuna space, objective, ASHA, retries, workers, grouping) cannot change at all.
A resume reads nothing Tune saved: a new Tune experiment of the same trials, each continuing from its saved state
(:mod:`itrlab.sweep.trial_store`), after :func:`check_parent` refuses a state copied from another sweep or a folder
rolled back after its sweep finished.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
from pathlib import Path
from typing import Any

from itrlab.config import ExperimentConfig
from itrlab.config.schema import differences
from itrlab.config.sweep import SweepSpec
from itrlab.errors import UserInputError
from itrlab.files import atomic_write_json
from itrlab.sweep.trial_store import TRIALS_FOLDER, ended_trials, stored_trials
from itrlab.train.provenance import data_digest

_log = logging.getLogger(__name__)

STATE_FILE = "itrlab_sweep.json"
STATE_LIMIT = 16 << 20  # bytes: a state file larger than this was not written by itrlab
# what names the trials and their saved states: a resumed sweep cannot change them
FIXED = ("grid", "seeds", "optuna", "objective", "asha", "max_failures", "num_workers", "trainer", "group")
# how a sweep runs, not what: free to change on resume (--cpus-per-trial, --concurrency ...)
FREE = ("name", "description", "aliases", "resources", "concurrency")


def read_sweep_state(sweep_dir: Path) -> dict[str, Any]:
    """The state file of an invocation (UserInputError when it is not one itrlab wrote)."""
    path = sweep_dir / STATE_FILE
    try:
        if path.stat().st_size > STATE_LIMIT:
            raise ValueError(f"{path.stat().st_size:,} bytes")
        state = json.loads(path.read_text(encoding="utf-8"))
        if (
            not isinstance(state, dict)
            or not isinstance(state.get("parent_run_id"), str)
            or not isinstance(state.get("overrides"), list)
        ):
            raise ValueError("it names no parent run")
    except (OSError, ValueError, UnicodeDecodeError) as err:
        raise UserInputError(
            f"--resume: {path} is not a sweep's state as itrlab writes it ({err}); nothing was run"
        ) from None
    return state


def check_layout(sweep_dir: Path) -> None:
    """A UserInputError for a sweep whose trials' checkpoints live in Tune's own saved state (a folder written by
    an itrlab that resumed through ``Tuner.restore``): this one resumes only from each trial's saved state."""
    tune_dir = sweep_dir / "tune"
    if not (sweep_dir / TRIALS_FOLDER).is_dir() and any(tune_dir.glob("*/checkpoint_*")):
        raise UserInputError(
            f"--resume {sweep_dir.name}: its trials' checkpoints are in Tune's saved state ({tune_dir}), which this "
            f"itrlab does not read back: resume it with the itrlab that started it, or run the sweep again"
        )


def check_parent(sweep_dir: Path, name: str, state: dict[str, Any], parent: dict[str, Any]) -> None:
    """The parent run the state file names (``parent``: its record in MLflow, which whoever writes the storage
    cannot change) is this invocation's, and the folder is not older than the run: a UserInputError, one line,
    for a state copied from another sweep or a folder rolled back after its sweep finished (the run FINISHED, the
    state not), so that nothing recorded is run again."""
    recorded = Path(str(parent["tags"].get("itrlab.sweep_dir", "")))
    if parent["tags"].get("itrlab.sweep") != name or recorded.parts[-2:] != sweep_dir.parts[-2:]:
        raise UserInputError(
            f"--resume {sweep_dir.name}: its state names the parent run {state['parent_run_id']}, which belongs to "
            f"the sweep folder {recorded or 'of another sweep'}; nothing was run"
        )
    if parent["status"] == "FINISHED" and state.get("status") != "FINISHED":
        raise UserInputError(
            f"--resume {sweep_dir.name}: its parent run {state['parent_run_id']} ended FINISHED but the folder's "
            f"state says {state.get('status', 'nothing')}: the folder was rolled back; nothing was run"
        )


def nothing_left_to_run(sweep_dir: Path, state: dict[str, Any], trials: int) -> bool:
    """Whether ``--resume`` of this invocation would run nothing: it ended FINISHED and each of its ``trials``
    had ended (a trial that failed is run again by a resume). Such a resume changes nothing already recorded:
    not the parent run's end, its invocation time or its report."""
    if state.get("status") != "FINISHED":
        return False
    ended = ended_trials(sweep_dir)
    return len(ended) >= trials and len(ended) == len(stored_trials(sweep_dir))


def write_state(sweep_dir: Path, state: dict[str, Any]) -> None:
    atomic_write_json(sweep_dir / STATE_FILE, state)


def set_status(sweep_dir: Path, status: str) -> None:
    """How the invocation ended, in its state file (best effort: the parent run holds it too)."""
    try:
        state = read_sweep_state(sweep_dir)
        write_state(sweep_dir, {**state, "status": status})
    except (UserInputError, OSError):
        pass


def started_at(sweep_dir: Path, state: dict[str, Any]) -> float:
    """When the invocation started: as recorded, else (a state of an itrlab before it recorded it) when its
    state file was written."""
    value = state.get("started_at")
    if isinstance(value, (int, float)):
        return float(value)
    return (sweep_dir / STATE_FILE).stat().st_mtime


def _when(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def pick(storage: Path, name: str, which: str | None) -> Path:
    """The invocation ``--resume`` continues: ``which`` (a folder name under ``<storage>/<name>``, or a path)
    whatever its state, else the newest unfinished one by its recorded start; a UserInputError when there
    is none (naming the finished ones). Several unfinished ones: the newest, and a line that lists them."""
    if which:
        folder = Path(which) if os.sep in which else storage / name / which
        if not (folder / STATE_FILE).is_file():
            raise UserInputError(
                f"--resume {which}: {folder} holds no sweep state ({STATE_FILE}); "
                f"{_listing(storage, name) or 'no invocation of ' + repr(name) + ' is there'}"
            )
        return folder.resolve()
    candidates = _invocations(storage, name)
    open_ones = [(start, folder, status) for start, folder, status in candidates if status != "FINISHED"]
    if not open_ones:
        finished = ", ".join(f"{folder.name} (started {_when(start)})" for start, folder, _ in candidates[-5:])
        raise UserInputError(
            f"--resume: no interrupted sweep '{name}' under {storage / name}"
            + (f"; finished: {finished}: reopen one by name (--resume NAME)" if finished else "")
        )
    start, folder, status = open_ones[-1]
    if len(open_ones) > 1:
        others = "; ".join(f"{f.name} (started {_when(s)}, {st.lower()})" for s, f, st in open_ones[-2::-1][:5])
        _log.info(
            f"--resume: continuing {folder.name} (started {_when(start)}), the newest of {len(open_ones)} "
            f"interrupted invocations; also resumable: {others} (--resume NAME picks one)"
        )
    return folder


def _invocations(storage: Path, name: str) -> list[tuple[float, Path, str]]:
    """(start, folder, status) of every invocation with a state file, oldest first."""
    found = []
    for folder in (storage / name).glob("*"):
        if not (folder / STATE_FILE).is_file():
            continue
        try:
            state = read_sweep_state(folder)
        except UserInputError:
            continue
        status = state.get("status") if isinstance(state.get("status"), str) else "UNKNOWN"
        found.append((started_at(folder, state), folder, status))
    return sorted(found, key=lambda item: (item[0], item[1].name))


def _listing(storage: Path, name: str) -> str:
    items = _invocations(storage, name)
    return "invocations: " + ", ".join(f"{f.name} ({st.lower()})" for _, f, st in items[-5:]) if items else ""


def data_digests(configs: list[ExperimentConfig]) -> dict[str, str]:
    """The digest of every data folder the trials read (those present)."""
    by_root = {str(config.dataset.root): config for config in configs}
    return {root: digest for root, config in sorted(by_root.items()) if (digest := data_digest(config)) is not None}


def invocation_record(
    spec: SweepSpec, overrides: list[str], base: ExperimentConfig, data: dict[str, str]
) -> dict[str, Any]:
    """What an invocation runs, as its state file records it."""
    settings = {key: value for key, value in spec.model_dump(mode="json").items() if key not in FREE}
    return {"spec": settings, "overrides": list(overrides), "config": base.flat(), "data": data}


def changes(state: dict[str, Any], now: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(what cannot change on resume, what may with --allow-changes): one line per difference between the
    recorded invocation and this one. A state without a record (an itrlab before it recorded one) differs
    in nothing it did not record."""
    spec_was, spec_now = state.get("spec"), now["spec"]
    fixed, free = [], []
    if isinstance(spec_was, dict):
        fixed = differences(
            {k: v for k, v in spec_was.items() if k in FIXED},
            {k: v for k, v in spec_now.items() if k in FIXED},
            "the sweep file's ",
        )
        free = differences(
            {k: v for k, v in spec_was.items() if k not in FIXED},
            {k: v for k, v in spec_now.items() if k not in FIXED},
            "the sweep file's ",
        )
    if isinstance(state.get("config"), dict):
        free += differences(state["config"], now["config"], "the resolved config's ")
    if isinstance(state.get("data"), dict):
        free += [
            f"the data in {root}: recorded digest {digest}, now {now['data'].get(root, 'absent')}"
            for root, digest in state["data"].items()
            if now["data"].get(root, digest) != digest
        ]
    return fixed, free


def check_unchanged(state: dict[str, Any], now: dict[str, Any], allow: bool, sweep_dir: Path) -> list[str]:
    """The differences ``--allow-changes`` accepts (empty when none); a UserInputError, one line, when one
    cannot change or is not allowed."""
    fixed, free = changes(state, now)
    if fixed:
        raise UserInputError(
            f"--resume {sweep_dir.name}: {fixed[0]}"
            + (f" (and {len(fixed) - 1} more)" if fixed[1:] else "")
            + "; a resume continues the trials the sweep laid out and no others: start a new sweep to run "
            "these (the grid, seeds, Optuna space, objective, ASHA, retries, workers and grouping "
            "cannot change on --resume)"
        )
    if free and not allow:
        raise UserInputError(
            f"--resume {sweep_dir.name}: the sweep differs from what its first invocation recorded: "
            f"{free[0]}"
            + (f" (and {len(free) - 1} more)" if free[1:] else "")
            + "; nothing was run. Resume without the change, pass --allow-changes to run it so "
            "(recorded on the parent run), or start a new sweep"
        )
    return free
