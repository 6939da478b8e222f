"""A run's folder as its lifecycle holds it (itrlab.train.lifecycle): locked against a second holder, a fresh
run's folder claimed under another name when taken, and a folder made for the run that nothing landed in
removed again, one that was there kept."""

from __future__ import annotations

import pytest

from conftest import tiny_config
from itrlab.errors import UserInputError
from itrlab.train.lifecycle import RunLifecycle


def test_a_held_run_folder_refuses_a_second_holder_and_goes_when_nothing_landed(tmp_path, tiny_root):
    config = tiny_config(tiny_root)
    folder = tmp_path / "runs" / "given"
    with RunLifecycle(config, folder, hold=True):
        assert folder.is_dir()
        with pytest.raises(UserInputError, match=f"the run folder {folder}"):
            with RunLifecycle(config, folder, hold=True):
                pass
    assert not folder.exists()
    kept = tmp_path / "runs" / "there"
    kept.mkdir()
    with RunLifecycle(config, kept, hold=True):
        pass
    assert kept.is_dir()  # not made for the run: kept, empty or not


def test_a_fresh_run_claims_its_folder_once_opened_under_another_name_when_taken(tmp_path, tiny_root):
    config = tiny_config(tiny_root)
    taken = tmp_path / "runs" / "20260101-000000"
    taken.mkdir(parents=True)
    with RunLifecycle(config, taken, hold=True, claim=True) as run:
        assert run.run_dir == taken  # nothing claimed before every check passed
        run.open()
        assert run.run_dir == taken.parent / f"{taken.name}-1" and run.run_dir.is_dir()
        (run.run_dir / "config.yaml").write_text("landed")
    assert (run.run_dir / "config.yaml").is_file() and taken.is_dir()
    with RunLifecycle(config, taken, hold=True, claim=True) as empty:
        empty.open()
        assert empty.run_dir == taken.parent / f"{taken.name}-2"
    assert not empty.run_dir.exists()  # nothing landed in it
