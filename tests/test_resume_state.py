"""What ``--resume`` continues and what it trusts, on state files and folders made here (no Ray, no MLflow):
the newest interrupted invocation by its recorded start, not by its folder's name (issue #30 item 4), and the
signatures of the Tune state a resume hands to ``Tuner.restore`` (item 1)."""

from __future__ import annotations

import json
import os
import stat
import time

import pytest

from itrlab.errors import UserInputError
from itrlab.sweep import integrity
from itrlab.sweep.resume import STATE_FILE, pick


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


@pytest.fixture
def key(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv(integrity.KEY_ENV, raising=False)
    return tmp_path / "home" / ".config" / "itrlab" / "secret"


def tune_state(sweep):
    tune = sweep / "tune"
    (tune / "trial_0").mkdir(parents=True)
    (tune / "tuner.pkl").write_bytes(b"tuner")
    (tune / "experiment_state-1.json").write_text("{}")
    (tune / "trial_0" / "error.pkl").write_bytes(b"error")
    (tune / "trial_0" / "params.pkl").write_bytes(b"never read back")
    return tune


def test_signed_state_verifies_and_the_key_is_created_private(tmp_path, key):
    sweep = tmp_path / "sweep"
    tune = tune_state(sweep)
    integrity.sign(sweep, tune)
    integrity.verify(sweep)
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and len(key.read_bytes().strip()) == 64
    manifest = json.loads((sweep / integrity.MANIFEST).read_text())["files"]
    assert set(manifest) == {"tune/tuner.pkl", "tune/experiment_state-1.json", "tune/trial_0/error.pkl"}


@pytest.mark.parametrize("tamper, why", [
    (lambda tune: (tune / "tuner.pkl").write_bytes(b"tuner, changed"), "was changed after itrlab saved it"),
    (lambda tune: (tune / "searcher-state-9.pkl").write_bytes(b"planted"), "was not saved by itrlab here"),
    (lambda tune: (tune / ".hidden.json").write_text("{}"), "was not saved by itrlab here"),
    (lambda tune: (tune / "trial_0" / "error.pkl").write_bytes(b"planted"), "was changed after itrlab saved it"),
    (lambda tune: (tune / "experiment_state-1.json").rename(tune / "experiment_state-2.json"), "not saved by itrlab"),
], ids=["tuner.pkl changed", "a planted searcher state", "a hidden json", "error.pkl changed", "a renamed state"])
def test_state_changed_or_planted_after_signing_is_refused(tmp_path, key, tamper, why):
    sweep = tmp_path / "sweep"
    tune = tune_state(sweep)
    integrity.sign(sweep, tune)
    tamper(tune)
    with pytest.raises(UserInputError, match=why):
        integrity.verify(sweep)


def test_another_installations_key_or_none_refuses(tmp_path, key, monkeypatch):
    sweep = tmp_path / "sweep"
    tune_state(sweep)
    integrity.sign(sweep, sweep / "tune")
    other = tmp_path / "other-key"
    other.write_text("f" * 64)
    monkeypatch.setenv(integrity.KEY_ENV, str(other))
    with pytest.raises(UserInputError, match="no valid signature of this installation's key"):
        integrity.verify(sweep)
    monkeypatch.setenv(integrity.KEY_ENV, str(tmp_path / "missing"))  # a Secret not mounted: never made up
    with pytest.raises(UserInputError, match="does not exist"):
        integrity.verify(sweep)
    assert not (tmp_path / "missing").exists()
