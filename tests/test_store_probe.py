"""The store probe (itrlab.tracking.probe): what it tells of a run without MLflow, and what it leaves to MLflow."""

from __future__ import annotations

import sqlite3

import pytest

from itrlab.errors import UserInputError
from itrlab.tracking.probe import check_sources_in_store, holds_run, run_of_source

MISSING = "0123456789abcdef0123456789abcdef"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A real MLflow SQLite store holding one run: (its URI, the run's id)."""
    import mlflow

    uri = f"sqlite:///{tmp_path_factory.mktemp('probe') / 'mlflow.db'}"
    client = mlflow.MlflowClient(uri)
    return uri, client.create_run(client.create_experiment("e")).info.run_id


def test_it_finds_a_run_of_the_store_and_not_another(store):
    uri, run_id = store
    assert holds_run(uri, run_id) is True
    assert holds_run(uri, MISSING) is False
    check_sources_in_store([f"runs:/{run_id}/model", run_id], uri)  # held: nothing said
    with pytest.raises(UserInputError, match=f"holds no run {MISSING}: a run of another store"):
        check_sources_in_store([f"runs:/{run_id}/model", f"runs:/{MISSING}/model"], uri)


def test_what_it_cannot_tell_goes_on_to_mlflow(tmp_path):
    assert holds_run("http://127.0.0.1:9/", MISSING) is None  # a server: MLflow asks it
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    assert holds_run(f"sqlite:///{other}", MISSING) is None  # no MLflow store: MLflow says what it is
    assert holds_run(f"sqlite:///{tmp_path / 'absent.db'}", MISSING) is False
    with pytest.raises(UserInputError, match=r"absent.db \(no such database file\) holds no run"):
        check_sources_in_store([MISSING], f"sqlite:///{tmp_path / 'absent.db'}")


def test_only_runs_are_probed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run_of_source(MISSING) == MISSING
    (tmp_path / MISSING).mkdir()  # a folder here named like a run id is a folder
    assert run_of_source(MISSING) is None
    assert run_of_source("models:/name/1") is None
    assert run_of_source(f"runs:/{MISSING}/model") == MISSING
