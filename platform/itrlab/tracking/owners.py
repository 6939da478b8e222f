"""Runs left RUNNING by processes that died: ended KILLED, with the reason.

Every run itrlab starts or reopens carries :data:`OWNER_TAG`, the process that ends it. :func:`end_runs_of` is what
a job's watchdog (:mod:`itrlab.tracking.watchdog`) does when the job died without ending its runs;
:func:`close_orphaned_runs`, run by every ``train`` and ``sweep`` once its store answered, ends the RUNNING runs
whose owner ran on this machine and is gone. A run owned on another machine is left alone: its owner cannot be
seen from here.
"""

from __future__ import annotations

import logging

from mlflow import MlflowClient
from mlflow.entities import RunStatus, RunTag

from itrlab.process_id import owner_alive
from itrlab.tracking.mlflow_tracker import OWNER_TAG, STOP_REASON_TAG, end_time_ms
from itrlab.tracking.store import resolve_tracking_uri, sqlite_path

_log = logging.getLogger(__name__)

SCAN_LIMIT = 5000  # RUNNING runs looked at per command


def _running(client: MlflowClient, extra: str = "") -> list:
    experiments = [e.experiment_id for e in client.search_experiments(max_results=1000)]
    if not experiments:
        return []
    return client.search_runs(
        experiments, filter_string=f"attributes.status = 'RUNNING'{extra}", max_results=SCAN_LIMIT
    )


def _kill(client: MlflowClient, run, reason: str) -> None:
    client.log_batch(run.info.run_id, tags=[RunTag(STOP_REASON_TAG, reason)])
    client.set_terminated(
        run.info.run_id, status=RunStatus.to_string(RunStatus.KILLED), end_time=end_time_ms(run.info.start_time)
    )


def _died(owner: str, what: str) -> str:
    return (
        f"{what} (pid {owner.split('|')[2]} on {owner.split('|')[0]}) died without ending its runs: killed "
        f"(SIGKILL, out of memory), a bus error (a memory-mapped data file truncated while read), or its Ray "
        f"node lost"
    )


def end_runs_of(owner: str, what: str, tracking_uri: str | None = None) -> int:
    """End KILLED every RUNNING run ``owner`` left (a watchdog's job died), one line on stderr; exit status."""
    uri = resolve_tracking_uri(tracking_uri)
    database = sqlite_path(uri)
    if database is not None and not database.is_file():
        return 0  # the job never created its store: nothing to end, and nothing is created here
    reason = _died(owner, what)
    try:
        client = MlflowClient(tracking_uri=uri)
        runs = _running(client, f" and tags.`{OWNER_TAG}` = '{owner}'")
        for run in runs:
            _kill(client, run, reason)
    except Exception as err:  # noqa: BLE001 - the next command on the store ends them
        _log.warning(
            f"itrlab: {what} died; its MLflow runs could not be ended here ({type(err).__name__}); the next "
            f"itrlab command on {uri} ends them"
        )
        return 1
    if runs:
        _log.warning(
            f"itrlab: {reason}; ended its {len(runs)} MLflow run(s) left RUNNING as KILLED with that reason"
            + ("; --resume continues it" if "sweep" in what else "")
        )
    return 0


def close_orphaned_runs(tracking_uri: str) -> list[str]:
    """End KILLED every RUNNING run of the store whose owner ran on this machine and is gone, the reason in
    ``itrlab.stop_reason``, and say so on one line. Best effort: never stops the command. Returns their ids."""
    closed = []
    try:
        client = MlflowClient(tracking_uri=tracking_uri)
        for run in _running(client, f" and tags.`{OWNER_TAG}` LIKE '%'"):
            owner = run.data.tags.get(OWNER_TAG, "")
            if owner_alive(owner) is False:
                _kill(client, run, _died(owner, "its process") + "; ended by a later itrlab command")
                closed.append(run.info.run_id)
    except Exception as err:  # noqa: BLE001 - the command's own store check passed
        _log.info(f"itrlab: could not look for runs left RUNNING by dead processes ({type(err).__name__})")
    if closed:
        _log.info(
            f"itrlab: ended {len(closed)} MLflow run(s) KILLED that processes which died had left RUNNING: "
            f"{', '.join(closed[:5])}{' ...' if len(closed) > 5 else ''}"
        )
    return closed
