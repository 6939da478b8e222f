"""What ``--resume`` continues and what it checks, on state files and folders made here (no Ray, no MLflow): the
newest interrupted invocation by its recorded start, not by its folder's name; each trial's saved state (its newest
whole epoch, what it reported, how it ended); the parent run a state names; an Optuna study cut short."""

from __future__ import annotations

import json
import os
import time

import pytest

from itrlab.errors import DataError, StorageError, UserInputError
from itrlab.sweep.resume import STATE_FILE, check_layout, check_parent, nothing_left_to_run, pick
from itrlab.sweep.search import STUDY_FILE, cut_short
from itrlab.sweep.trial_store import LATEST, TRIALS_FOLDER, TrialStore, stored_trials, trial_key


def invocation(storage, name: str, started: float, status: str | None):
    folder = storage / "sweep" / name
    folder.mkdir(parents=True)
    state = {"parent_run_id": "p" + name, "run_name": name, "overrides": [], "started_at": started}
    if status:
        state["status"] = status
    (folder / STATE_FILE).write_text(json.dumps(state))
    return folder


def test_resume_picks_the_newest_interrupted_invocation_by_its_recorded_start(tmp_path, capsys):
    now = time.time()
    invocation(tmp_path, "20261126-120000", now + 300, "FINISHED")  # the newest: finished, never picked
    east = invocation(tmp_path, "20261127-030000", now + 100, "KILLED")  # named in UTC+9: the greatest name
    died = invocation(tmp_path, "20261126-110000", now + 200, "RUNNING")  # its driver died: interrupted too
    assert pick(tmp_path, "sweep", None) == died
    out = capsys.readouterr().out
    assert "continuing 20261126-110000" in out and "the newest of 2 interrupted" in out and east.name in out
    assert pick(tmp_path, "sweep", east.name) == east.resolve()


def test_a_finished_sweep_is_reopened_only_by_name(tmp_path):
    finished = invocation(tmp_path, "20261126-120000", time.time(), "FINISHED")
    with pytest.raises(UserInputError, match="no interrupted sweep 'sweep'.*finished: 20261126-120000.*--resume NAME"):
        pick(tmp_path, "sweep", None)
    assert pick(tmp_path, "sweep", finished.name) == finished.resolve()
    with pytest.raises(UserInputError, match="holds no sweep state"):
        pick(tmp_path, "sweep", "20990101-000000")


def test_a_state_without_a_start_counts_from_its_file(tmp_path):
    older = invocation(tmp_path, "b", 0, None)
    newer = invocation(tmp_path, "a", 0, None)  # an itrlab before it recorded starts and endings
    for folder, when in ((older, 1_000_000), (newer, 2_000_000)):
        state = json.loads((folder / STATE_FILE).read_text())
        del state["started_at"]
        (folder / STATE_FILE).write_text(json.dumps(state))
        os.utime(folder / STATE_FILE, (when, when))
    assert pick(tmp_path, "sweep", None) == newer


def stored(tmp_path, epochs: int) -> tuple[TrialStore, list[dict]]:
    """A trial's store after ``epochs`` saved epochs of a working folder holding ``last.pt`` with the epoch."""
    store, working, reports = TrialStore(tmp_path / "sweep", trial_key({"seed": 0})), tmp_path / "work", []
    working.mkdir(exist_ok=True)
    for epoch in range(1, epochs + 1):
        (working / "last.pt").write_text(f"epoch {epoch}")
        reports.append({"epoch": epoch, "rsum": 10.0 * epoch})
        store.save(epoch, working, reports)
    return store, reports


def test_a_trials_folder_is_named_by_its_point_the_same_in_every_invocation():
    assert trial_key({"seed": 0, "gamma": 0.2}) == trial_key({"gamma": 0.2, "seed": 0})
    assert trial_key({"seed": 0, "gamma": 0.2}) != trial_key({"seed": 1, "gamma": 0.2})
    assert len(trial_key({})) == 16


def test_a_restored_trial_gets_its_newest_saved_epoch_and_what_it_reported_up_to_it(tmp_path):
    store, reports = stored(tmp_path, 3)
    assert sorted(p.name for p in store.folder.glob("epoch_*")) == ["epoch_00003"]  # older copies go
    (store.folder / ".epoch_00004.partial").mkdir()  # a copy cut short by a crash: never named, never restored
    (store.folder / ".epoch_00004.partial" / "last.pt").write_text("epoch 4, half written")
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert store.restore(fresh) == reports and (fresh / "last.pt").read_text() == "epoch 3"
    assert store.final() is None and TrialStore(tmp_path / "sweep", "other").restore(fresh) == []


def test_a_trial_that_ended_or_was_stopped_keeps_its_last_result(tmp_path):
    store, reports = stored(tmp_path, 2)
    store.stop("stopped early by the scheduler (ASHA)")
    assert store.final() == {**reports[-1], "stopped": 1, "stop_reason": "stopped early by the scheduler (ASHA)"}
    store.begin({"seed": 0})
    store.begin({"seed": 1})  # recorded once, at the first start
    assert store.point() == {"seed": 0} and [s.key for s in stored_trials(tmp_path / "sweep")] == [store.key]


def test_a_saved_state_itrlab_did_not_write_is_one_line_naming_it(tmp_path):
    store, _ = stored(tmp_path, 1)
    (store.folder / LATEST).write_text('["not", "a", "record"]')
    with pytest.raises(DataError, match=r"latest.json.*not a trial's latest.json as itrlab writes it"):
        store.restore(tmp_path / "work")


def finished_state(tmp_path, trials: int, ended: int) -> tuple:
    folder = invocation(tmp_path, "20261126-080454", time.time(), "FINISHED")
    for seed in range(trials):
        store = TrialStore(folder, trial_key({"seed": seed}))
        store.begin({"seed": seed})
        if seed < ended:
            store.finish({"done": 1})
    return folder, json.loads((folder / STATE_FILE).read_text())


def test_a_finished_sweep_has_nothing_left_only_when_every_trial_ended(tmp_path):
    folder, state = finished_state(tmp_path / "a", 2, 2)
    assert nothing_left_to_run(folder, state, 2)
    assert not nothing_left_to_run(folder, state, 3)  # a trial never started
    assert not nothing_left_to_run(folder, {**state, "status": "KILLED"}, 2)
    folder, state = finished_state(tmp_path / "b", 2, 1)  # a trial that failed: a resume runs it again
    assert not nothing_left_to_run(folder, state, 2)


def parent(name: str, folder: str, status: str) -> dict:
    return {"status": status, "tags": {"itrlab.sweep": name, "itrlab.sweep_dir": folder}}


def test_a_state_naming_another_sweeps_parent_or_a_rolled_back_folder_is_refused(tmp_path):
    folder = invocation(tmp_path / "storage", "20261126-080454", time.time(), "KILLED")
    state = json.loads((folder / STATE_FILE).read_text())
    check_parent(folder, "sweep", state, parent("sweep", str(folder), "KILLED"))
    check_parent(folder, "sweep", state, parent("sweep", "/moved/storage/sweep/20261126-080454", "KILLED"))
    with pytest.raises(UserInputError, match="belongs to the sweep folder .*20261126-090000; nothing was run"):
        check_parent(folder, "sweep", state, parent("sweep", str(folder.parent / "20261126-090000"), "KILLED"))
    with pytest.raises(UserInputError, match="belongs to"):
        check_parent(folder, "sweep", state, parent("other", str(folder), "KILLED"))
    with pytest.raises(UserInputError, match="ended FINISHED but the folder's state says KILLED: .*rolled back"):
        check_parent(folder, "sweep", state, parent("sweep", str(folder), "FINISHED"))


def test_a_sweep_whose_checkpoints_are_in_tunes_saved_state_is_refused(tmp_path):
    folder = invocation(tmp_path, "20261126-080454", time.time(), "KILLED")
    check_layout(folder)  # nothing of Tune's: fine
    (folder / "tune" / "run_trial_0" / "checkpoint_000001").mkdir(parents=True)
    with pytest.raises(UserInputError, match="checkpoints are in Tune's saved state .*the itrlab that started it"):
        check_layout(folder)
    (folder / TRIALS_FOLDER).mkdir()
    check_layout(folder)  # Tune's folder of an earlier invocation beside the trials' own: not read


def test_a_resumed_search_asks_again_for_what_was_cut_short_and_counts_what_ended(tmp_path):
    import optuna

    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / STUDY_FILE}")
    assert cut_short(storage, "search") == ([], 0)  # the search never asked
    study = optuna.create_study(study_name="search", storage=storage, direction="maximize")
    done = study.ask()
    done.suggest_float("gamma", 0.1, 0.3)
    study.tell(done, 5.0)
    running = study.ask()
    gamma = running.suggest_float("gamma", 0.1, 0.3)
    assert cut_short(storage, "search") == ([{"gamma": gamma}], 1)
    states = [trial.state.name for trial in study.get_trials()]
    assert states == ["COMPLETE", "FAIL"]  # no longer waited on
    assert cut_short(storage, "search") == ([], 2)


def test_a_copy_the_storage_does_not_take_is_one_error_and_the_previous_copy_stays_named(tmp_path):
    store, reports = stored(tmp_path, 1)
    blocker = store.folder / ".epoch_00002.partial"
    blocker.write_text("a file where the copy's folder goes")  # no folder can be made there, root or not
    (tmp_path / "work" / "last.pt").write_text("epoch 2")
    with pytest.raises(StorageError, match=r"the checkpoint of epoch 2 cannot be stored in the sweep's storage"):
        store.save(2, tmp_path / "work", [*reports, {"epoch": 2}])
    assert store.latest()["copy"] == "epoch_00001" and store.reports() == reports


def test_a_trial_holds_its_folder_while_it_runs(tmp_path):
    """A search that asks for a configuration again runs a second trial of the same point: it waits for the
    first (then reports its result) instead of writing the same folder at once."""
    from itrlab.files import file_lock

    store = TrialStore(tmp_path / "sweep", trial_key({"seed": 0}))
    with store.held():
        with pytest.raises(UserInputError, match="is in use by another process"):
            with file_lock(store.folder, blocking=False):
                pass
    with file_lock(store.folder, blocking=False):  # released with the trial
        pass
    assert list(store.folder.iterdir()) == []  # no lock file: nothing of the storage held open for writing
