"""What ``--resume`` continues and what it trusts, on state files and folders made here (no Ray, no MLflow):
the newest interrupted invocation by its recorded start, not by its folder's name (issue #30 item 4), and the
signatures of the Tune state a resume hands to ``Tuner.restore`` (item 1)."""

from __future__ import annotations

import json
import os
import shutil
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


SWEEP = "sweep/20261126-080454 (parent run p1)"  # the identity a signature binds a file to (integrity.identity)


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
    integrity.sign(sweep, tune, SWEEP)
    assert integrity.verify(sweep, SWEEP) == 1  # the manifest's generation
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and len(key.read_bytes().strip()) == 64
    manifest = json.loads((sweep / integrity.MANIFEST).read_text())["files"]
    assert set(manifest) == {"tune/tuner.pkl", "tune/experiment_state-1.json", "tune/trial_0/error.pkl"}
    assert (
        integrity.identity(tmp_path / "dbl_tiny" / "20261126-080454", "abc")
        == "dbl_tiny/20261126-080454 (parent run abc)"
    )


@pytest.mark.parametrize(
    "tamper, why",
    [
        (lambda tune: (tune / "tuner.pkl").write_bytes(b"tuner, changed"), "was changed after itrlab saved it"),
        (lambda tune: (tune / "searcher-state-9.pkl").write_bytes(b"planted"), "was not saved by itrlab here"),
        (lambda tune: (tune / ".hidden.json").write_text("{}"), "was not saved by itrlab here"),
        (lambda tune: (tune / "trial_0" / "error.pkl").write_bytes(b"planted"), "was changed after itrlab saved it"),
        (
            lambda tune: (tune / "experiment_state-1.json").rename(tune / "experiment_state-2.json"),
            "not saved by itrlab",
        ),
    ],
    ids=["tuner.pkl changed", "a planted searcher state", "a hidden json", "error.pkl changed", "a renamed state"],
)
def test_state_changed_or_planted_after_signing_is_refused(tmp_path, key, tamper, why):
    sweep = tmp_path / "sweep"
    tune = tune_state(sweep)
    integrity.sign(sweep, tune, SWEEP)
    tamper(tune)
    with pytest.raises(UserInputError, match=why):
        integrity.verify(sweep, SWEEP)


def test_a_version_whose_signature_cannot_be_written_is_withheld_from_the_upload(tmp_path, key, monkeypatch):
    """Tune saves a new version in its staging folder and uploads it right after, overwriting the stored file in
    place, which a full disk often allows while the manifest's atomic replacement fails: the version left
    unsigned is taken out of the staging folder before that upload, so the storage keeps the version signed
    last, and the state verifies once the disk has room again."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    staging = tune_state(tmp_path / "driver")  # the driver's staging copy of tune/
    monkeypatch.setattr(integrity.StateSigner, "staging", staging)
    monkeypatch.setattr(integrity.StateSigner, "tune_dir", sweep / "tune")
    monkeypatch.setattr(integrity.StateSigner, "sweep", SWEEP)
    signer = integrity.StateSigner()
    signer.get_state()  # Tune saved its state to staging: signed
    shutil.copytree(staging, sweep / "tune")  # and uploaded
    (staging / "experiment_state-1.json").write_text('{"saved": "again"}')  # the next save
    (sweep / f"{integrity.MANIFEST}.tmp").mkdir()  # the manifest cannot be replaced now (a full disk in life)
    signer.get_state()
    assert not (staging / "experiment_state-1.json").exists() and (staging / "tuner.pkl").exists()
    shutil.copytree(staging, sweep / "tune", dirs_exist_ok=True)  # the upload that follows
    assert (sweep / "tune" / "experiment_state-1.json").read_text() == "{}"
    assert integrity.verify(sweep, SWEEP) == 1


def test_another_installations_key_or_none_refuses(tmp_path, key, monkeypatch):
    sweep = tmp_path / "sweep"
    tune_state(sweep)
    integrity.sign(sweep, sweep / "tune", SWEEP)
    other = tmp_path / "other-key"
    other.write_text("f" * 64)
    other.chmod(0o600)
    monkeypatch.setenv(integrity.KEY_ENV, str(other))
    with pytest.raises(UserInputError, match="sealed with another key than this installation's"):
        integrity.verify(sweep, SWEEP)
    monkeypatch.setenv(integrity.KEY_ENV, str(tmp_path / "missing"))  # a Secret not mounted: never made up
    with pytest.raises(UserInputError, match="does not exist"):
        integrity.verify(sweep, SWEEP)
    assert not (tmp_path / "missing").exists()


def test_state_copied_from_another_sweep_is_refused(tmp_path, key):
    """Issue #45 item 1: another sweep's signed files, with or without its manifest, do not verify here."""
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    tune_state(ours)
    integrity.sign(ours, ours / "tune", SWEEP)
    tune_state(theirs)
    (theirs / "tune" / "tuner.pkl").write_bytes(b"their tuner")
    other = "sweep/20261127-090000 (parent run p2)"
    integrity.sign(theirs, theirs / "tune", other)
    shutil.copyfile(theirs / "tune" / "tuner.pkl", ours / "tune" / "tuner.pkl")  # their file, our manifest
    with pytest.raises(UserInputError, match="tuner.pkl was changed after itrlab saved it"):
        integrity.verify(ours, SWEEP)
    shutil.copyfile(theirs / integrity.MANIFEST, ours / integrity.MANIFEST)  # and their manifest
    with pytest.raises(
        UserInputError,
        match=r"are those of the sweep 'sweep/20261127-090000 \(parent run p2\)', "
        r"not of this one .*copied from another sweep is refused",
    ):
        integrity.verify(ours, SWEEP)
    manifest = json.loads((ours / integrity.MANIFEST).read_text())
    manifest["sweep"] = SWEEP  # their manifest relabelled: its seal no longer holds
    (ours / integrity.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(UserInputError, match="was changed after itrlab wrote it"):
        integrity.verify(ours, SWEEP)


def test_a_version_the_storage_outgrew_is_refused_as_rolled_back(tmp_path, key):
    """Tune saves a file in the driver's staging folder (signed there) and uploads it later: a version stays
    valid until the storage holds a newer one, then it is refused as a rollback."""
    sweep, staging = tmp_path / "sweep", tmp_path / "staging"
    storage = tune_state(sweep)
    staging.mkdir()
    state = "experiment_state-1.json"
    versions = [b'{"v": 1}', b'{"v": 2}', b'{"v": 3}']
    (staging / state).write_bytes(versions[0])
    integrity.sign(sweep, staging, SWEEP)
    integrity.sign(sweep, storage, SWEEP, only={"tune/tuner.pkl", "tune/trial_0/error.pkl"})
    (storage / state).write_bytes(versions[0])  # uploaded
    (staging / state).write_bytes(versions[1])
    integrity.sign(sweep, staging, SWEEP)  # saved, not uploaded yet: both stay valid
    integrity.verify(sweep, SWEEP)
    (storage / state).write_bytes(versions[1])  # uploaded
    (staging / state).write_bytes(versions[2])
    integrity.sign(sweep, staging, SWEEP)  # the storage holds version 2 now: version 1 is outgrown
    (storage / state).write_bytes(versions[2])
    integrity.sign(sweep, staging, SWEEP)  # what the end of an invocation does, once Tune's last upload is done
    newest = integrity.verify(sweep, SWEEP)
    for old in versions[:2]:
        (storage / state).write_bytes(old)
        with pytest.raises(UserInputError, match="is an older version of the file itrlab saved last"):
            integrity.verify(sweep, SWEEP)
    (storage / state).write_bytes(versions[2])
    assert integrity.verify(sweep, SWEEP, at_least=newest) == newest


def test_a_manifest_rolled_back_with_its_files_is_refused(tmp_path, key):
    """The whole folder, manifest included, put back as it was: its generation is below what the parent run
    recorded when the last invocation ended (integrity.GENERATION_TAG)."""
    sweep = tmp_path / "sweep"
    tune = tune_state(sweep)
    integrity.sign(sweep, tune, SWEEP)
    backup = tmp_path / "backup"
    shutil.copytree(sweep, backup)
    (tune / "experiment_state-1.json").write_text('{"later": true}')
    integrity.sign(sweep, tune, SWEEP)
    recorded = integrity.generation(sweep, SWEEP)
    assert integrity.recorded_generation({integrity.GENERATION_TAG: str(recorded)}) == recorded == 2
    shutil.rmtree(sweep)
    shutil.copytree(backup, sweep)
    assert integrity.verify(sweep, SWEEP) == 1  # valid in itself
    with pytest.raises(
        UserInputError,
        match=r"is an older state of this sweep \(generation 1; its parent run "
        r"recorded 2 .*rolled back is refused",
    ):
        integrity.verify(sweep, SWEEP, at_least=recorded)
    shutil.rmtree(sweep / "tune")  # the state removed altogether: no fresh start in its place
    with pytest.raises(UserInputError, match=r"holds none of the Tune state its parent run recorded \(generation 2\)"):
        integrity.verify(sweep, SWEEP, at_least=recorded)


def test_a_key_others_can_read_or_that_is_missing_is_refused_before_anything(tmp_path, key, monkeypatch):
    """Issue #45 item 7: the key named by ITRLAB_SECRET_FILE must exist, be a file and be private (0600)."""
    named = tmp_path / "sweep-key"
    named.write_text("a" * 64)
    named.chmod(0o644)
    monkeypatch.setenv(integrity.KEY_ENV, str(named))
    with pytest.raises(
        UserInputError,
        match=rf"sweep signing key {named} has mode 0644: others can read or change "
        rf"it; run `chmod 600 {named}`",
    ):
        integrity.installation_key()
    named.chmod(0o640)
    with pytest.raises(UserInputError, match="has mode 0640"):
        integrity.installation_key()
    named.chmod(0o600)
    assert integrity.installation_key() == b"a" * 64
    monkeypatch.setenv(integrity.KEY_ENV, str(tmp_path))
    with pytest.raises(UserInputError, match="is not a file"):
        integrity.installation_key()
    monkeypatch.setenv(integrity.KEY_ENV, str(tmp_path / "absent"))
    with pytest.raises(
        UserInputError,
        match=f"sweep signing key {tmp_path / 'absent'} does not exist \\({integrity.KEY_ENV} names it\\)",
    ):
        integrity.installation_key()
