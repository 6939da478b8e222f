"""Runs of one experiment that write the store at the same moment, as a sweep's trials do when they start
together (two 1-thread trials at a time on 2 cores): each one's write lands."""

from __future__ import annotations

import multiprocessing

import pytest

pytestmark = pytest.mark.e2e  # starts processes

WRITERS, ROUNDS = 6, 4


def _log_data_sets(uri: str, barrier, round_digests: list[str], out) -> None:
    from itrlab.tracking import MlflowTracker

    tracker = MlflowTracker("together", uri)
    tracker.start("writer", {}, {})
    try:
        for digest in round_digests:
            barrier.wait(timeout=120)  # every writer logs the same new data set at once
            tracker.log_dataset("synthetic_small", digest, "data/synthetic/small")
        tracker.end()
        out.put(("ok", tracker.run_id))
    except Exception as err:  # noqa: BLE001 - the test reports what the writer met
        out.put(("failed", f"{type(err).__name__}: {err}"))


def test_trials_that_log_one_new_data_set_at_once_all_log_it(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    from itrlab.tracking import MlflowTracker

    MlflowTracker("together", uri).start("first", {}, {})  # the store and the experiment exist before the race
    spawn = multiprocessing.get_context("spawn")
    barrier, out = spawn.Barrier(WRITERS), spawn.Queue()
    digests = [f"digest{round_:02d}" for round_ in range(ROUNDS)]
    writers = [spawn.Process(target=_log_data_sets, args=(uri, barrier, digests, out)) for _ in range(WRITERS)]
    for writer in writers:
        writer.start()
    results = [out.get(timeout=300) for _ in writers]
    for writer in writers:
        writer.join(timeout=60)
    assert [status for status, _ in results] == ["ok"] * WRITERS, results
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    for _, run_id in results:
        logged = {entry.dataset.digest for entry in client.get_run(run_id).inputs.dataset_inputs}
        assert logged == set(digests)
